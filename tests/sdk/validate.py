#!/usr/bin/env python3
"""Validates what pagent sends and reads against the official SDKs' own types.

    validate.py request KIND FILE...   each FILE a JSON request body (or JSON lines of them)
    validate.py stream KIND FILE...    each FILE an event stream (text/event-stream)
    validate.py schema KIND FILE...    each FILE a structured-output schema (or JSON lines)

KIND is `responses` (openai's ResponseCreateParamsStreaming / ResponseStreamEvent),
`chat` (openai's CompletionCreateParamsStreaming / ChatCompletionChunk) or `anthropic`
(anthropic's MessageCreateParamsStreaming / RawMessageStreamEvent).

For `schema`, KIND is `openai` or `anthropic`: each schema must come out of the SDK's own
conversion unchanged (openai's `_ensure_strict_json_schema`, which makes a schema strict;
anthropic's `transform_schema`, which makes one fit structured outputs and moves what they
do not take into the description), so the form pagent sends is one the SDK would send.

A request body must validate as the SDK's TypedDict and hold no key the SDK does not know
(pydantic ignores unknown keys of a TypedDict; a walk along the type hints finds them). An
event must validate as the SDK's event model of its `type`; an event type the SDK does not
know is named (pagent ignores those) and fails only with --known-only. With --lenient, fields
the SDK requires but the server left out are listed instead of failing (llama.cpp's server
leaves out `sequence_number`, `output_index`...), while a field of the wrong type still fails. Prints one line per file; exits 1
on the first file that fails. Runs in the venv of .ci/sdk.sh.
"""
import json
import sys
import typing

import pydantic
from typing_extensions import get_args, get_origin, get_type_hints, is_typeddict

KINDS = {}


def kind(name):
    if name in KINDS:
        return KINDS[name]
    if name == "responses":
        from openai.types.responses import ResponseStreamEvent
        from openai.types.responses.response_create_params import ResponseCreateParamsStreaming

        KINDS[name] = (ResponseCreateParamsStreaming, ResponseStreamEvent)
    elif name == "chat":
        from openai.types.chat import ChatCompletionChunk
        from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming

        KINDS[name] = (CompletionCreateParamsStreaming, ChatCompletionChunk)
    elif name == "anthropic":
        from anthropic.types import RawMessageStreamEvent
        from anthropic.types.message_create_params import MessageCreateParamsStreaming

        KINDS[name] = (MessageCreateParamsStreaming, RawMessageStreamEvent)
    else:
        sys.exit(f"unknown kind {name!r}")
    return KINDS[name]


def models_by_type(union):
    """The event models of a union, by the literal of their `type` field."""
    out = {}
    args = get_args(union)
    if args and get_origin(union) is typing.Annotated:
        args = get_args(args[0])
    for model in args:
        field = model.model_fields.get("type")
        for literal in get_args(field.annotation) if field else ():
            out[literal] = model
    return out


def only_missing(errors):
    """True when the errors are fields left out only: outside unions, every error is a
    missing field; inside a union, one branch (a model named in the error's path) has
    nothing but missing fields."""
    plain, branches = [], {}
    for err in errors:
        loc = err["loc"]
        at = next((i for i, part in enumerate(loc) if isinstance(part, str) and part[:1].isupper()), None)
        if at is None:
            plain.append(err)
        else:
            branches.setdefault(loc[: at + 1], []).append(err)
    if any(err["type"] != "missing" for err in plain):
        return False
    by_union = {}
    for branch, errs in branches.items():
        by_union.setdefault(branch[:-1], []).append(all(e["type"] == "missing" for e in errs))
    return all(any(ok) for ok in by_union.values())


def fits(value, tp):
    try:
        pydantic.TypeAdapter(tp).validate_python(value)
        return True
    except Exception:
        return False


def unknown_keys(value, tp, path="$"):
    """The paths of keys of `value` that the type `tp` has no place for."""
    origin = get_origin(tp)
    if origin is typing.Annotated:
        return unknown_keys(value, get_args(tp)[0], path)
    if origin in (typing.Required, typing.NotRequired) or str(origin).endswith(
        ("Required", "NotRequired", "ReadOnly")
    ):
        return unknown_keys(value, get_args(tp)[0], path)
    if origin is typing.Union or str(type(tp)) == "<class 'types.UnionType'>":
        best = None
        for member in get_args(tp):
            if member is type(None) or not fits(value, member):
                continue
            found = unknown_keys(value, member, path)
            if not found:
                return []
            best = best if best is not None and len(best) <= len(found) else found
        return best or []
    if is_typeddict(tp) and isinstance(value, dict):
        return unknown_fields(value, get_type_hints(tp, include_extras=True), path)
    if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel) and isinstance(value, dict):
        # Some request unions take the SDK's response models too (an earlier reply's blocks).
        fields = {(f.alias or name): f.annotation for name, f in tp.model_fields.items()}
        return unknown_fields(value, fields, path)
    if origin in (list, typing.List, typing.Iterable, typing.Sequence) or str(origin) in (
        "<class 'collections.abc.Iterable'>",
        "<class 'collections.abc.Sequence'>",
    ):
        args = get_args(tp)
        if args and isinstance(value, list):
            return [p for i, v in enumerate(value) for p in unknown_keys(v, args[0], f"{path}[{i}]")]
    if origin in (dict, typing.Dict):
        return []
    return []


def unknown_fields(value, fields, path):
    """The keys of the object `value` that are not among `fields` (name to type), and those
    its known fields hold."""
    out = []
    for key, item in value.items():
        if key not in fields:
            out.append(f"{path}.{key}")
        else:
            out += unknown_keys(item, fields[key], f"{path}.{key}")
    return out


def requests(path):
    text = open(path, encoding="utf-8").read()
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def events(path):
    """The JSON data of each event of an SSE file."""
    data = []
    for line in open(path, encoding="utf-8").read().replace("\r\n", "\n").split("\n"):
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
        elif line == "" and data:
            payload = "\n".join(data)
            data = []
            if payload.strip() != "[DONE]":
                yield json.loads(payload)
    if data and "\n".join(data).strip() != "[DONE]":
        yield json.loads("\n".join(data))


def converted(name, schema):
    """The schema as the SDK of `name` converts it for its structured outputs."""
    import copy

    if name == "openai":
        from openai.lib._pydantic import _ensure_strict_json_schema

        schema = copy.deepcopy(schema)
        return _ensure_strict_json_schema(schema, path=(), root=schema)
    if name == "anthropic":
        from anthropic.lib._parse._transform import transform_schema

        return transform_schema(copy.deepcopy(schema))
    sys.exit(f"unknown schema kind {name!r}")


def untyped_literals(schema):
    """The schema without the `type` of each `enum` or `const` node."""
    if isinstance(schema, list):
        return [untyped_literals(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: (v if k in ("enum", "const") else untyped_literals(v)) for k, v in schema.items()}
    if "enum" in out or "const" in out:
        out.pop("type", None)
    return out


def check_schemas(name, files):
    failed = False
    for path in files:
        n = 0
        for schema in requests(path):
            n += 1
            out = converted(name, schema)
            if name == "anthropic":
                # The SDK leaves out a `type` beside an `enum` or `const` (the values say it).
                out, schema = untyped_literals(out), untyped_literals(schema)
            if out != schema:
                failed = True
                print(f"FAILED {path}: schema {n} changes in the SDK's conversion:\n"
                      f"  sent: {json.dumps(schema, sort_keys=True)}\n"
                      f"   sdk: {json.dumps(out, sort_keys=True)}")
                break
        else:
            print(f"ok {path}: {n} schema(s)")
    sys.exit(1 if failed else 0)


def main():
    args = sys.argv[1:]
    if args and args[0] == "schema":
        check_schemas(args[1], args[2:])
    known_only = "--known-only" in args
    lenient = "--lenient" in args
    args = [a for a in args if a not in ("--known-only", "--lenient")]
    mode, name, files = args[0], args[1], args[2:]
    request_type, event_type = kind(name)
    failed = False
    for path in files:
        try:
            if mode == "request":
                n = 0
                for body in requests(path):
                    pydantic.TypeAdapter(request_type).validate_python(body)
                    extra = unknown_keys(body, request_type)
                    if extra:
                        raise ValueError(f"keys the SDK does not know: {extra}")
                    n += 1
                print(f"ok {path}: {n} request(s)")
            else:
                models = models_by_type(event_type)
                known, unknown, missing = 0, set(), set()
                for event in events(path):
                    model = models.get(event.get("type"))
                    if model is None:
                        if known_only:
                            raise ValueError(f"an event type the SDK does not know: {event.get('type')}")
                        unknown.add(event.get("type"))
                        continue
                    try:
                        model.model_validate(event)
                    except pydantic.ValidationError as e:
                        errors = e.errors()
                        if not lenient or not only_missing(errors):
                            raise
                        missing |= {
                            f"{event['type']}: {'.'.join(map(str, err['loc']))}"
                            for err in errors
                            if err["type"] == "missing"
                        }
                    known += 1
                note = f", ignored types unknown to the SDK: {sorted(unknown)}" if unknown else ""
                if missing:
                    note += f", fields the server left out: {sorted(missing)}"
                print(f"ok {path}: {known} event(s){note}")
        except Exception as e:  # noqa: BLE001 - report and go on to the next file
            failed = True
            print(f"FAILED {path}: {str(e)[:2000]}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

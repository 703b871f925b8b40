//! The data model's enums that say which variant they are in a field of their own
//! (`{"role": "user", ..}` for a [`Message`](crate::Message), `{"type": "text", ..}` for a
//! [`ContentBlock`](crate::ContentBlock), a [`Part`](crate::Part), a
//! [`Source`](crate::Source), a [`StreamEvent`](crate::llm::StreamEvent)), read in one pass.
//!
//! serde's derive reads such an enum (`#[serde(tag = "role")]`) by buffering the whole
//! object into a tree of its own first, to find the tag wherever it stands, then reading
//! the variant out of that tree: every nested object and list a tree of its own, on every
//! message of a transcript loaded from a session file or from Redis. Here the object's keys
//! are read in order: when the tag comes first (as pagent writes every such object), its
//! value names the variant and the rest of the object is read straight into that variant,
//! with no buffer. Entries before the tag, when another writer put it further on, are
//! buffered (as [`serde_json::Value`]) and read first once the tag is known.
//!
//! The results and errors are the derive's: unknown fields skipped, `missing field `role``
//! when there is no tag, `unknown variant` naming the ones there are, `duplicate field` for
//! a second tag.
//!
//! The providers' stream objects, read from their JSON text with other rules (a type the
//! decoder does not know is skipped, not an error), have a way of their own:
//! `crate::llm::tagged`.
//!
//! [`tagged_enum!`] declares such an enum: the public enum as written, serialized by the
//! derive (the tag first), and its reading through [`deserialize`], with the variants
//! read by serde's derive of the same body as an externally tagged enum
//! (`#[serde(remote = ..)]`), so that each variant's fields and their attributes are written
//! once.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::{CowStrDeserializer, MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IgnoredAny, IntoDeserializer, MapAccess,
    SeqAccess, VariantAccess, Visitor,
};
use serde_json::Value;

/// An enum whose variant is named by the field [`ByTag::TAG`].
pub(crate) trait ByTag: Sized {
    /// The enum's name, for errors.
    const NAME: &'static str;
    /// The field that names the variant.
    const TAG: &'static str;
    /// Reads the enum from a deserializer of an externally tagged enum
    /// (`deserialize_enum`): the variant's name, then its fields as a map.
    fn variant<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error>;
}

/// Reads a `T` from an object that names its variant in `T::TAG`.
pub(crate) fn deserialize<'de, T: ByTag, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
    d.deserialize_any(Object(PhantomData::<T>))
}

/// Declares a public enum tagged by the field `tag`, serialized by serde's derive and read
/// through [`deserialize`]. The enum is written as usual, with `Serialize` derived and
/// without `Deserialize` or a serde container attribute: the macro gives both derives'
/// `tag` and `rename_all = "snake_case"`, so the writing and the reading name the same
/// field. `remote` is the enum's name as a string.
macro_rules! tagged_enum {
    (
        tag = $tag:tt, remote = $remote:tt;
        $(#[$meta:meta])*
        pub enum $name:ident $body:tt
    ) => {
        $(#[$meta])*
        #[serde(tag = $tag, rename_all = "snake_case")]
        pub enum $name $body

        const _: () = {
            /// The variants as an externally tagged enum, read by serde's derive.
            #[derive(serde::Deserialize)]
            #[serde(remote = $remote, rename_all = "snake_case")]
            #[allow(dead_code)]
            enum Variants $body

            impl $crate::tag::ByTag for $name {
                const NAME: &'static str = $remote;
                const TAG: &'static str = $tag;
                fn variant<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                    Variants::deserialize(d)
                }
            }

            // The signature as the derive writes it, so that the public API reads the same.
            impl<'de> serde::Deserialize<'de> for $name {
                fn deserialize<__D>(d: __D) -> Result<Self, __D::Error>
                where
                    __D: serde::Deserializer<'de>,
                {
                    $crate::tag::deserialize(d)
                }
            }
        };
    };
}
pub(crate) use tagged_enum;

/// Visits the object.
struct Object<T>(PhantomData<T>);

impl<'de, T: ByTag> Visitor<'de> for Object<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The derive's words.
        write!(f, "internally tagged enum {}", T::NAME)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        // The entries before the tag: none when the tag comes first.
        let mut before = Vec::new();
        loop {
            let Some(key) = map.next_key_seed(KEY)? else {
                return Err(de::Error::missing_field(T::TAG));
            };
            if key == T::TAG {
                let name = map.next_value_seed(NAME)?;
                let rest = Rest {
                    before: before.into_iter(),
                    value: None,
                    map,
                    tag: T::TAG,
                };
                return T::variant(Variant { name, rest });
            }
            let value: Value = map.next_value()?;
            before.push((key, value));
        }
    }

    /// The derive's other form: a list of the tag, then the variant's fields in order.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<T, A::Error> {
        let Some(name) = seq.next_element_seed(NAME)? else {
            return Err(de::Error::missing_field(T::TAG));
        };
        T::variant(Variant {
            name,
            rest: List(seq),
        })
    }
}

/// A string: borrowed from the input when the deserializer can, else owned; the words are
/// what it was expected to be.
#[derive(Clone, Copy)]
struct Text(&'static str);

/// A key.
const KEY: Text = Text("a field name");
/// The tag's value, in serde's own words for a tag that is not a name.
const NAME: Text = Text("variant identifier");

impl<'de> DeserializeSeed<'de> for Text {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Cow<'de, str>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Text {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

/// The object as an externally tagged enum: the variant's name, then the rest of the
/// object as its fields.
struct Variant<'de, R> {
    name: Cow<'de, str>,
    /// The variant's fields: [`Rest`] of an object, [`List`] of a list.
    rest: R,
}

impl<'de, R: VariantAccess<'de>> Deserializer<'de> for Variant<'de, R> {
    type Error = R::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, R::Error> {
        visitor.visit_enum(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

impl<'de, R: VariantAccess<'de>> EnumAccess<'de> for Variant<'de, R> {
    type Error = R::Error;
    type Variant = R;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, R), R::Error> {
        let name: CowStrDeserializer<'de, R::Error> = self.name.into_deserializer();
        Ok((seed.deserialize(name)?, self.rest))
    }
}

/// The object's entries but the tag: those buffered before it, then the rest as they come.
struct Rest<'de, M> {
    before: std::vec::IntoIter<(Cow<'de, str>, Value)>,
    /// The value of the buffered key just read.
    value: Option<Value>,
    map: M,
    tag: &'static str,
}

impl<'de, M: MapAccess<'de>> MapAccess<'de> for Rest<'de, M> {
    type Error = M::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, M::Error> {
        let key = match self.before.next() {
            Some((key, value)) => {
                self.value = Some(value);
                key
            }
            None => match self.map.next_key_seed(KEY)? {
                None => return Ok(None),
                Some(key) if key == self.tag => return Err(de::Error::duplicate_field(self.tag)),
                Some(key) => key,
            },
        };
        let key: CowStrDeserializer<'de, M::Error> = key.into_deserializer();
        seed.deserialize(key).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, M::Error> {
        match self.value.take() {
            Some(value) => seed.deserialize(value).map_err(de::Error::custom),
            None => self.map.next_value_seed(seed),
        }
    }
}

impl<'de, M: MapAccess<'de>> VariantAccess<'de> for Rest<'de, M> {
    type Error = M::Error;

    fn unit_variant(mut self) -> Result<(), M::Error> {
        // A variant without fields, as the derive reads it: other fields are skipped.
        while self.next_key::<IgnoredAny>()?.is_some() {
            self.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, M::Error> {
        seed.deserialize(MapAccessDeserializer::new(self))
    }

    fn tuple_variant<V: Visitor<'de>>(self, _: usize, _: V) -> Result<V::Value, M::Error> {
        Err(no_tuple())
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, M::Error> {
        visitor.visit_map(self)
    }
}

/// The rest of a list after its tag: the variant's fields in order.
struct List<S>(S);

impl<'de, S: SeqAccess<'de>> VariantAccess<'de> for List<S> {
    type Error = S::Error;

    fn unit_variant(mut self) -> Result<(), S::Error> {
        while self.0.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, S::Error> {
        seed.deserialize(SeqAccessDeserializer::new(self.0))
    }

    fn tuple_variant<V: Visitor<'de>>(self, _: usize, _: V) -> Result<V::Value, S::Error> {
        Err(no_tuple())
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, S::Error> {
        visitor.visit_seq(self.0)
    }
}

/// A tagged enum has no variant of several values (serde's `Serialize` derive refuses one
/// beside `tag`), so no declared enum asks for one.
fn no_tuple<E: de::Error>() -> E {
    E::custom("a variant of several values cannot be named by a field")
}

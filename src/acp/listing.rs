//! What `session/list` lists: the live sessions, and those saved in
//! [`Options::session_dir`](super::Options::session_dir), with their working directory, title
//! and time of last activity.
//!
//! A saved session is its transcript, `<id>.jsonl`, and beside it `<id>.meta.json`:
//! `{"cwd": .., "title": ..}`, written when the session is set up and when it gets its
//! title. Its time is the transcript's modification time. A transcript without its meta file
//! (saved by an earlier version) is not listed: the protocol needs its `cwd`; it can still be
//! loaded by id.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a saved session's meta file holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Meta {
    pub(super) cwd: PathBuf,
    #[serde(default)]
    pub(super) title: Option<String>,
}

/// One entry of `session/list`'s answer.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Listed {
    pub(super) id: String,
    pub(super) meta: Meta,
    pub(super) updated: SystemTime,
}

impl Listed {
    pub(super) fn to_json(&self) -> Value {
        let mut v = serde_json::json!({
            "sessionId": self.id,
            "cwd": self.meta.cwd,
            "updatedAt": rfc3339(self.updated),
        });
        if let Some(title) = &self.meta.title {
            v["title"] = Value::from(title.as_str());
        }
        v
    }
}

fn meta_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.meta.json"))
}

/// Writes session `id`'s meta file (a temporary file renamed over it, so that a reader never
/// sees half of one). A failure is not the session's: it is then not listed.
pub(super) fn save_meta(dir: &Path, id: &str, meta: &Meta) {
    let path = meta_path(dir, id);
    let tmp = dir.join(format!(".{id}.meta.json.tmp"));
    // OK because a Meta is a path and a string: it always serializes.
    let bytes = serde_json::to_vec(meta).unwrap_or_default();
    if std::fs::write(&tmp, bytes).is_ok() {
        let _ = std::fs::rename(&tmp, &path);
    }
}

/// Session `id`'s meta file, if it has a readable one.
pub(super) fn load_meta(dir: &Path, id: &str) -> Option<Meta> {
    let bytes = std::fs::read(meta_path(dir, id)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Removes session `id`'s files; false when it had no transcript.
pub(super) fn delete(dir: &Path, id: &str) -> bool {
    let _ = std::fs::remove_file(meta_path(dir, id));
    std::fs::remove_file(dir.join(format!("{id}.jsonl"))).is_ok()
}

/// The sessions saved in `dir` with a meta file, but those `skip` names.
pub(super) fn saved(dir: &Path, skip: &dyn Fn(&str) -> bool) -> Vec<Listed> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".jsonl")) else {
            continue;
        };
        if !plain_id(id) || skip(id) {
            continue;
        }
        let Some(meta) = load_meta(dir, id) else {
            continue;
        };
        let updated = entry
            .metadata()
            .and_then(|m| m.modified())
            .unwrap_or(UNIX_EPOCH);
        out.push(Listed {
            id: id.to_owned(),
            meta,
            updated,
        });
    }
    out
}

/// True for an id made of the characters pagent's ids have: one that names a file safely.
pub(super) fn plain_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A session's title from its first prompt: the first line with text, at most 80 characters.
pub(super) fn title_of(prompt: &str) -> Option<String> {
    let line = prompt.lines().map(str::trim).find(|l| !l.is_empty())?;
    let mut title: String = line.chars().take(80).collect();
    if title.len() < line.len() {
        title.push('…');
    }
    Some(title)
}

/// `t` in UTC as RFC 3339 with whole seconds (`2026-12-01T14:05:00Z`).
pub(super) fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Days to a civil date (Howard Hinnant's algorithm), in the proleptic Gregorian calendar.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn times_are_rfc3339_in_utc() {
        let at = |secs: u64| rfc3339(UNIX_EPOCH + Duration::from_secs(secs));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_796_130_300), "2026-12-01T13:05:00Z");
        assert_eq!(at(4_107_542_399), "2100-02-28T23:59:59Z");
    }

    #[test]
    fn a_title_is_the_first_line_with_text_cut_at_80_characters() {
        assert_eq!(
            title_of("\n  Fix the build \nplease"),
            Some("Fix the build".into())
        );
        assert_eq!(title_of(" \n "), None);
        let long = "é".repeat(100);
        assert_eq!(title_of(&long), Some(format!("{}…", "é".repeat(80))));
    }

    #[test]
    fn saved_sessions_with_a_meta_file_are_listed_and_deleted() {
        let dir = std::env::temp_dir().join(format!("pagent-acp-listing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for id in ["a1", "b2", "c3"] {
            std::fs::write(dir.join(format!("{id}.jsonl")), "").unwrap();
        }
        let meta = Meta {
            cwd: "/work".into(),
            title: Some("First".into()),
        };
        save_meta(&dir, "a1", &meta);
        save_meta(&dir, "b2", &Meta::default());
        let mut listed: Vec<String> = saved(&dir, &|id| id == "b2")
            .into_iter()
            .map(|l| l.id)
            .collect();
        listed.sort();
        assert_eq!(listed, ["a1"]);
        assert_eq!(load_meta(&dir, "a1"), Some(meta));
        assert!(delete(&dir, "a1"));
        assert!(!delete(&dir, "a1"));
        assert_eq!(load_meta(&dir, "a1"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

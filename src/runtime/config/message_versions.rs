//! Settings for messages of other releases during a rolling upgrade:
//! how long a message newer than this build waits for a newer process,
//! and which wire version this process writes (`BOSUN_COMPAT_VERSION`).

use std::time::Duration;

use super::ConfigError;
use super::types::invalid;

/// How this process treats messages of other releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageVersionSettings {
    /// `BOSUN_NEWER_MESSAGE_WAIT`: how long a message this build cannot
    /// read yet (a newer schema version, or a handler that needs a newer
    /// release) waits before it is looked at again. Default 60 s.
    pub newer_message_wait: Duration,
    /// `BOSUN_NEWER_MESSAGE_PATIENCE`: how long such a message may wait,
    /// from when it was first seen waiting, before it is dead-lettered
    /// (`needs-newer`). Default 24 h.
    pub newer_message_patience: Duration,
    /// `BOSUN_COMPAT_VERSION`: the wire version this process writes
    /// messages at (each at the newest version that wire had); `None`
    /// (unset or empty) writes the current one,
    /// [`bosun_contracts::WIRE_VERSION`]. Set to the previous release's
    /// wire version while it still runs.
    pub compat_version: Option<u32>,
}

impl Default for MessageVersionSettings {
    fn default() -> Self {
        Self {
            newer_message_wait: Duration::from_secs(60),
            newer_message_patience: Duration::from_secs(24 * 3600),
            compat_version: None,
        }
    }
}

impl MessageVersionSettings {
    /// Reads the settings through `get`.
    pub fn read(get: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let defaults = Self::default();
        let duration = |name: &str, default: Duration| -> Result<Duration, ConfigError> {
            match get(name) {
                None => Ok(default),
                Some(text) => parse_duration(&text).ok_or_else(|| {
                    invalid(
                        name,
                        format!("`{text}` is not a duration (a number with ms, s, m, h or d, e.g. 60s or 24h)"),
                    )
                }),
            }
        };
        let newer_message_wait = duration("BOSUN_NEWER_MESSAGE_WAIT", defaults.newer_message_wait)?;
        if newer_message_wait.is_zero() {
            return Err(invalid("BOSUN_NEWER_MESSAGE_WAIT", "must be more than 0"));
        }
        let newer_message_patience = duration("BOSUN_NEWER_MESSAGE_PATIENCE", defaults.newer_message_patience)?;
        let compat_version = match get("BOSUN_COMPAT_VERSION").map(|text| text.trim().to_owned()) {
            None => None,
            Some(text) if text.is_empty() => None,
            Some(text) => {
                let wire = text
                    .parse::<u32>()
                    .map_err(|_| invalid("BOSUN_COMPAT_VERSION", format!("`{text}` is not a wire version")))?;
                let (oldest, newest) = (
                    bosun_contracts::versions::oldest_wire_read(),
                    bosun_contracts::WIRE_VERSION,
                );
                if wire < oldest || wire > newest {
                    return Err(invalid(
                        "BOSUN_COMPAT_VERSION",
                        format!(
                            "{wire} is not a wire version this build writes ({oldest} to {newest}); unset it to write {newest}"
                        ),
                    ));
                }
                Some(wire)
            }
        };
        Ok(Self {
            newer_message_wait,
            newer_message_patience,
            compat_version,
        })
    }

    /// The wire version this process writes.
    pub fn wire(&self) -> u32 {
        self.compat_version.unwrap_or(bosun_contracts::WIRE_VERSION)
    }
}

/// `250ms`, `60s`, `15m`, `24h`, `7d`; a bare number is seconds.
fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let seconds = |factor: u64| number.checked_mul(factor).map(Duration::from_secs);
    match unit.trim() {
        "ms" => Some(Duration::from_millis(number)),
        "" | "s" => seconds(1),
        "m" => seconds(60),
        "h" => seconds(3600),
        "d" => seconds(86_400),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn read(pairs: &[(&str, &str)]) -> Result<MessageVersionSettings, ConfigError> {
        let map: BTreeMap<String, String> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        MessageVersionSettings::read(&|name| map.get(name).cloned())
    }

    #[test]
    fn defaults_wait_a_minute_for_a_day_and_write_the_current_wire() {
        let settings = read(&[]).unwrap();
        assert_eq!(settings, MessageVersionSettings::default());
        assert_eq!(settings.newer_message_wait, Duration::from_secs(60));
        assert_eq!(settings.newer_message_patience, Duration::from_secs(86_400));
        assert_eq!(settings.wire(), bosun_contracts::WIRE_VERSION);
        assert_eq!(read(&[("BOSUN_COMPAT_VERSION", " ")]).unwrap().compat_version, None);
    }

    #[test]
    fn durations_and_the_compat_version_are_read() {
        let settings = read(&[
            ("BOSUN_NEWER_MESSAGE_WAIT", "250ms"),
            ("BOSUN_NEWER_MESSAGE_PATIENCE", "2h"),
            ("BOSUN_COMPAT_VERSION", "1"),
        ])
        .unwrap();
        assert_eq!(settings.newer_message_wait, Duration::from_millis(250));
        assert_eq!(settings.newer_message_patience, Duration::from_secs(7200));
        assert_eq!(settings.wire(), 1);
        assert_eq!(parse_duration("90"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("3d"), Some(Duration::from_secs(259_200)));
    }

    #[test]
    fn bad_values_are_refused_naming_the_setting() {
        for (name, value) in [
            ("BOSUN_NEWER_MESSAGE_WAIT", "soon"),
            ("BOSUN_NEWER_MESSAGE_WAIT", "0s"),
            ("BOSUN_NEWER_MESSAGE_PATIENCE", "1w"),
            ("BOSUN_COMPAT_VERSION", "two"),
            ("BOSUN_COMPAT_VERSION", "0"),
            ("BOSUN_COMPAT_VERSION", "99"),
        ] {
            let err = read(&[(name, value)]).unwrap_err();
            assert!(err.to_string().contains(name), "{name}={value}: {err}");
        }
    }
}

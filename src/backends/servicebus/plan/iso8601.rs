//! ISO 8601 durations as Service Bus writes and reads them (`PT1M`,
//! `P14D`, `P10675199DT2H48M5.4775807S`).

use std::time::Duration;

/// An ISO 8601 duration as Service Bus writes them: `PT1M`, `P14D`, `PT10M`.
pub fn iso8601_duration(duration: Duration) -> String {
    let total = duration.as_secs();
    let (days, hours, minutes, seconds) = (total / 86_400, total / 3600 % 24, total / 60 % 60, total % 60);
    let nanos = duration.subsec_nanos();
    let mut out = String::from("P");
    if days > 0 {
        out.push_str(&format!("{days}D"));
    }
    if hours > 0 || minutes > 0 || seconds > 0 || nanos > 0 || days == 0 {
        out.push('T');
        if hours > 0 {
            out.push_str(&format!("{hours}H"));
        }
        if minutes > 0 {
            out.push_str(&format!("{minutes}M"));
        }
        if nanos > 0 {
            let fraction = format!("{nanos:09}");
            out.push_str(&format!("{seconds}.{}S", fraction.trim_end_matches('0')));
        } else if seconds > 0 || (hours == 0 && minutes == 0) {
            out.push_str(&format!("{seconds}S"));
        }
    }
    out
}

/// Reads an ISO 8601 duration with days, hours, minutes and (fractional)
/// seconds (`P10675199DT2H48M5.4775807S`); years, months and weeks are not
/// used by Service Bus and give `None`.
pub fn parse_iso8601_duration(text: &str) -> Option<Duration> {
    let rest = text.trim().strip_prefix('P')?;
    if rest.is_empty() {
        return None;
    }
    let (date, time) = match rest.split_once('T') {
        Some((date, time)) => (date, Some(time)),
        None => (rest, None),
    };
    let mut total = Duration::ZERO;
    if !date.is_empty() {
        let days: u64 = date.strip_suffix('D')?.parse().ok()?;
        total += Duration::from_secs(days.checked_mul(86_400)?);
    }
    if let Some(mut time) = time {
        if time.is_empty() {
            return None;
        }
        while !time.is_empty() {
            let end = time.find(|c: char| c.is_ascii_alphabetic())?;
            let (number, unit) = (&time[..end], &time[end..=end]);
            total += match unit {
                "H" => Duration::from_secs(number.parse::<u64>().ok()?.checked_mul(3600)?),
                "M" => Duration::from_secs(number.parse::<u64>().ok()?.checked_mul(60)?),
                "S" => Duration::try_from_secs_f64(number.parse::<f64>().ok()?).ok()?,
                _ => return None,
            };
            time = &time[end + 1..];
        }
    }
    Some(total)
}

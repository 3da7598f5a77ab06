//! `bosun prune`: delete what is past its retention now, batch after batch
//! until nothing is left, with a line per batch (what `serve` does in the
//! background every `BOSUN_RETENTION_INTERVAL_MS`).

use std::io::Write;

use anyhow::Result;
use clap::Args;
use tokio_util::sync::CancellationToken;

use bosun::host::retention;
use bosun::ports::store::Pruned;
use bosun::runtime::config::Settings;
use bosun::wiring::{self, Backends};

use super::output::print_json;

/// `bosun prune`.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct PruneArgs {
    /// Print the totals as JSON (no progress lines).
    #[arg(long)]
    pub json: bool,
}

/// Prunes to completion (or until Ctrl-C) and prints what went.
pub async fn run(args: PruneArgs, settings: &Settings) -> Result<()> {
    let backends = Backends::open_existing(settings).await?;
    let policy = retention::policy(&settings.retention);
    let stop = CancellationToken::new();
    wiring::cancel_on_signals(stop.clone());
    let mut batches = 0usize;
    let total = retention::prune_all(
        backends.store.as_ref(),
        backends.transport.as_ref(),
        &policy,
        &stop,
        |batch| {
            batches += 1;
            if !args.json {
                let _ = write_batch(&mut std::io::stdout().lock(), batches, batch);
            }
        },
    )
    .await?;
    if args.json {
        print_json(&total)
    } else {
        write_total(&mut std::io::stdout().lock(), &total)
    }
}

fn write_batch(out: &mut impl Write, number: usize, batch: &Pruned) -> Result<()> {
    writeln!(out, "batch {number}: {batch}")?;
    Ok(())
}

fn write_total(out: &mut impl Write, total: &Pruned) -> Result<()> {
    if total.total() == 0 {
        writeln!(out, "nothing past its retention")?;
    } else {
        writeln!(out, "pruned {} rows: {total}", total.total())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn says_what_went() {
        let mut out = Vec::new();
        let batch = Pruned {
            handled: 3,
            sagas: 1,
            ..Pruned::default()
        };
        write_batch(&mut out, 1, &batch).unwrap();
        write_total(&mut out, &batch).unwrap();
        write_total(&mut out, &Pruned::default()).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "batch 1: handled 3, attempts 0, outbox 0, timeline 0, deliveries 0, sagas 1, duplicates 0, replay-jobs 0, \
             idempotency-keys 0, saga-history 0\n\
             pruned 4 rows: handled 3, attempts 0, outbox 0, timeline 0, deliveries 0, sagas 1, duplicates 0, \
             replay-jobs 0, idempotency-keys 0, saga-history 0\n\
             nothing past its retention\n"
        );
    }
}

//! `bosun audit export`: a tenant's release audit log as JSON lines, in
//! log order, for an auditor or a SIEM.

use std::io::Write;

use anyhow::Result;
use clap::Subcommand;

use bosun::operator::audit::{self, MAX_AUDIT_PAGE};
use bosun::runtime::config::Settings;
use bosun::wiring::Backends;

use super::output::parse_since;

/// `bosun audit ...`
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum AuditCommand {
    /// Every release decision of a tenant (requests, approvals, refusals
    /// with the rule, rejections, overrides, waits for a window, holds,
    /// policy changes, promotions, deployments), one JSON object per line,
    /// oldest first: who, when, what, why and through which door.
    Export {
        /// The tenant.
        #[arg(long, value_name = "ID", default_value = "default")]
        tenant: String,
        /// Only decisions taken since TIME (RFC 3339, or a duration ago:
        /// 30m, 2h, 7d).
        #[arg(long, value_name = "TIME")]
        since: Option<String>,
        /// Only this release's decisions.
        #[arg(long, value_name = "RELEASE_ID")]
        release: Option<String>,
    },
}

/// Runs an audit command.
pub async fn run(command: AuditCommand, settings: &Settings) -> Result<()> {
    match command {
        AuditCommand::Export { tenant, since, release } => {
            let since = since
                .map(|since| parse_since(&since, time::OffsetDateTime::now_utc()))
                .transpose()?;
            let backends = Backends::open_existing(settings).await?;
            let store = backends.audit.as_ref();
            let mut out = std::io::stdout().lock();
            if let Some(release) = release {
                let entries = audit::release_entries(store, &tenant, &release, MAX_AUDIT_PAGE).await?;
                for entry in entries
                    .iter()
                    .filter(|entry| since.is_none_or(|since| entry.at >= since))
                {
                    serde_json::to_writer(&mut out, entry)?;
                    out.write_all(b"\n")?;
                }
                out.flush()?;
                return Ok(());
            }
            let mut after = None;
            let mut exported = 0_u64;
            loop {
                let page = audit::entries(store, &tenant, since, after, MAX_AUDIT_PAGE).await?;
                for entry in &page {
                    serde_json::to_writer(&mut out, entry)?;
                    out.write_all(b"\n")?;
                }
                exported += page.len() as u64;
                let Some(last) = page.last() else { break };
                after = Some(last.sequence);
                if page.len() < MAX_AUDIT_PAGE {
                    break;
                }
                // A long log: say how far it is, where a person sees it.
                eprintln!("bosun audit export: {exported} entries so far");
            }
            out.flush()?;
            eprintln!("bosun audit export: {exported} entries of tenant {tenant}");
            Ok(())
        }
    }
}

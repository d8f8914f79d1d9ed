//! `[ip]`: how the client's address is found.

use super::super::schema::RawIp;
use super::super::spans::field;
use super::Ctx;
use crate::config::ConfigError;
use crate::key::ClientIpConfig;

/// The client address settings; trusting every address is refused.
pub(super) fn client_ip(raw: RawIp, ctx: &Ctx<'_>) -> Result<ClientIpConfig, ConfigError> {
    let at = field("ip");
    if let Some(all) = raw.trusted_proxies.iter().find(|n| n.prefix_len() == 0) {
        return Err(ctx.error(
            &at.key("trusted_proxies"),
            format!("{all} trusts every address: any client could choose its own key with a forwarded header"),
        ));
    }
    let mut ip = ClientIpConfig::default()
        .trust_proxies(raw.trusted_proxies)
        .forwarded_header(raw.forwarded_header);
    if let Some(p) = raw.ipv6_prefix {
        ip = ip
            .ipv6_prefix(p)
            .map_err(|e| ctx.error(&at.key("ipv6_prefix"), e.to_string()))?;
    }
    if let Some(p) = raw.ipv4_prefix {
        ip = ip
            .ipv4_prefix(p)
            .map_err(|e| ctx.error(&at.key("ipv4_prefix"), e.to_string()))?;
    }
    Ok(ip)
}

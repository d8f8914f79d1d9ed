//! `[ip]`: how the client's address is found.

use super::super::schema::RawIp;
use super::super::spans::field;
use super::Ctx;
use crate::runtime::config::ConfigError;
use crate::runtime::key::ClientIpConfig;

/// The client address settings; trusting every address is refused.
pub(super) fn client_ip(raw: RawIp, ctx: &Ctx<'_>) -> Result<ClientIpConfig, ConfigError> {
    let at = field("ip");
    // Judged as trusted: an IPv4-mapped network is the IPv4 network it
    // maps, so `::ffff:0:0/96` is `0.0.0.0/0`.
    for net in &raw.trusted_proxies {
        let trusted = crate::runtime::key::normalize_net(*net);
        if trusted.prefix_len() == 0 {
            let which = if trusted != *net {
                "every IPv4 address"
            } else {
                "every address"
            };
            return Err(ctx.error(
                &at.key("trusted_proxies"),
                format!("{net} trusts {which}: any client could choose its own key with a forwarded header"),
            ));
        }
    }
    // Together, too: `0.0.0.0/1` and `128.0.0.0/1` trust every client.
    let trusted: Vec<ipnet::IpNet> = raw
        .trusted_proxies
        .iter()
        .map(|n| crate::runtime::key::normalize_net(*n))
        .collect();
    if let Some(all) = ipnet::IpNet::aggregate(&trusted)
        .into_iter()
        .find(|n| n.prefix_len() == 0)
    {
        let family = if all.addr().is_ipv4() { "IPv4" } else { "IPv6" };
        return Err(ctx.error(
            &at.key("trusted_proxies"),
            format!(
                "together these networks trust every {family} address ({all}): any client could choose its own \
                 key with a forwarded header"
            ),
        ));
    }
    let mut ip = ClientIpConfig::default()
        .trust_proxies(raw.trusted_proxies)
        .forwarded_header(raw.forwarded_header)
        .share_bucket_without_peer(raw.without_peer);
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
    if let Some(p) = raw.ipv6_network_prefix {
        ip = ip
            .ipv6_network_prefix(p)
            .map_err(|e| ctx.error(&at.key("ipv6_network_prefix"), e.to_string()))?;
    }
    if let Some(p) = raw.ipv4_network_prefix {
        ip = ip
            .ipv4_network_prefix(p)
            .map_err(|e| ctx.error(&at.key("ipv4_network_prefix"), e.to_string()))?;
    }
    Ok(ip)
}

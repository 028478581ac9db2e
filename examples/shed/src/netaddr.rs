//! IPv4 ranges for the firewall check: parsing, and the address space no source range may name without
//! an acknowledgement (sheds have private addresses, so a rule admitting such space could admit one shed
//! to another's SSH port, and the server always connects to a shed's public address).

use std::fmt;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

/// An IPv4 CIDR block, normalised (host bits cleared).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cidr(Ipv4Net);

impl Cidr {
    /// Parses `a.b.c.d/n` (a bare address is a `/32`). Host bits must be clear, as a firewall rule
    /// stores them.
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let s = s.trim();
        let (a, l) = s.split_once('/').unwrap_or((s, "32"));
        let addr: Ipv4Addr = a
            .parse()
            .map_err(|_| format!("{s:?} is not an IPv4 CIDR (like 203.0.113.7/32)"))?;
        let net = l
            .parse()
            .ok()
            .filter(|_| l.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|len| Ipv4Net::new(addr, len).ok())
            .ok_or_else(|| format!("{s:?} has no prefix length of 0 to 32"))?;
        if net.trunc() != net {
            return Err(format!(
                "{s:?} has host bits set; the block is {}",
                net.trunc()
            ));
        }
        Ok(Cidr(net))
    }

    /// The block of one address.
    pub fn host(addr: Ipv4Addr) -> Cidr {
        Cidr(Ipv4Net::from(addr))
    }

    /// Whether `other` lies wholly inside this block.
    pub fn contains(&self, other: &Cidr) -> bool {
        self.0.contains(&other.0)
    }

    /// Whether the block is wider than a /24.
    pub fn wider_than_24(&self) -> bool {
        self.0.prefix_len() < 24
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The address space a source range may not lie in, and a believed address may not be in, with the
/// name messages give each.
pub const FORBIDDEN: [(&str, &str); 11] = [
    ("0.0.0.0/8", "unspecified"),
    ("10.0.0.0/8", "private"),
    ("172.16.0.0/12", "private"),
    ("192.168.0.0/16", "private"),
    ("100.64.0.0/10", "carrier-grade NAT"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("198.18.0.0/15", "benchmarking"),
    ("192.0.0.0/24", "protocol-assignment"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
];

/// The name of the forbidden space `c` lies in, if any.
pub fn forbidden_space(c: &Cidr) -> Option<&'static str> {
    FORBIDDEN.iter().find_map(|(block, name)| {
        let b = Cidr::parse(block).expect("the table holds valid blocks");
        b.contains(c).then_some(*name)
    })
}

/// Checks a configured static source range: an IPv4 CIDR, not wider than a /24 unless `acknowledged`,
/// and never in private, carrier-grade NAT, loopback, link-local, benchmarking, protocol-assignment or
/// reserved space.
pub fn check_static_range(s: &str, acknowledged: bool) -> Result<Cidr, String> {
    let c = Cidr::parse(s)?;
    if let Some(space) = forbidden_space(&c) {
        return Err(format!(
            "{c} is in {space} address space: sheds have private addresses, so such a range could admit one shed to another's SSH port; name the server's public address"
        ));
    }
    if c.wider_than_24() && !acknowledged {
        return Err(format!(
            "{c} is wider than a /24; set firewall.acknowledge_any: true to admit it"
        ));
    }
    Ok(c)
}

/// Normalises a rule's source range for comparison (a bare address is its /32); text that is not an
/// IPv4 CIDR is kept as it is, so it never equals an expected range.
pub fn normalise(s: &str) -> String {
    Cidr::parse(s)
        .map(|c| c.to_string())
        .unwrap_or_else(|_| s.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_ranges_are_ipv4_cidrs_outside_forbidden_space_and_at_most_a_24() {
        assert!(check_static_range("203.0.113.7/32", false).is_ok());
        assert!(check_static_range("198.51.100.0/24", false).is_ok());
        assert_eq!(
            check_static_range("203.0.113.7", false)
                .unwrap()
                .to_string(),
            "203.0.113.7/32"
        );
        let wide = check_static_range("0.0.0.0/0", false).unwrap_err();
        assert!(wide.contains("wider than a /24"), "{wide}");
        assert!(check_static_range("0.0.0.0/0", true).is_ok());
        assert!(check_static_range("203.0.112.0/23", true).is_ok());
        for (r, space) in [
            ("10.1.2.3/32", "private"),
            ("172.20.0.0/16", "private"),
            ("192.168.1.0/24", "private"),
            ("100.64.1.1/32", "carrier-grade NAT"),
            ("127.0.0.1/32", "loopback"),
            ("169.254.169.254/32", "link-local"),
            ("198.18.5.0/24", "benchmarking"),
            ("192.0.0.9/32", "protocol-assignment"),
            ("240.0.0.1/32", "reserved"),
        ] {
            let e = check_static_range(r, true).unwrap_err();
            assert!(e.contains(space), "{r}: {e}");
        }
        for bad in ["2001:db8::/32", "203.0.113.7/33", "host", "203.0.113.7/24"] {
            assert!(check_static_range(bad, true).is_err(), "{bad}");
        }
    }

    #[test]
    fn containment() {
        let a = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(a.contains(&Cidr::parse("10.2.0.0/16").unwrap()));
        assert!(!a.contains(&Cidr::parse("0.0.0.0/0").unwrap()));
        assert_eq!(normalise("203.0.113.7"), "203.0.113.7/32");
        assert_eq!(normalise("junk"), "junk");
    }
}

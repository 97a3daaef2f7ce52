//! Values as people write them on a command line: byte sizes (`8MiB`,
//! `512KiB`) and switches (`on`, `off`).

/// Parse `1048576`, `512KiB`, `8MiB`, `1GiB` (also kB/MB/GB as powers of 1000).
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: usize = digits
        .parse()
        .map_err(|_| format!("'{s}' is not a byte size"))?;
    let factor = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        u => return Err(format!("unknown size unit '{u}' (use KiB, MiB or GiB)")),
    };
    n.checked_mul(factor)
        .ok_or_else(|| format!("'{s}' is too large"))
}

/// Parse `on`/`off` (also true/false, 1/0, yes/no).
pub fn parse_switch(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "on" | "true" | "1" | "yes" => Ok(true),
        "off" | "false" | "0" | "no" => Ok(false),
        other => Err(format!("'{other}' is neither on nor off")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_bytes("8MiB"), Ok(8 << 20));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert_eq!(parse_bytes("2 KiB"), Ok(2048));
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("1 parsec").is_err());
    }

    #[test]
    fn switches() {
        assert_eq!(parse_switch("on"), Ok(true));
        assert_eq!(parse_switch(" OFF "), Ok(false));
        assert!(parse_switch("maybe")
            .unwrap_err()
            .contains("neither on nor off"));
    }
}

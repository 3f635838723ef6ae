//! Kubernetes resource quantities (`500m`, `8`, `32Gi`, `1e3`) as exact integers of milli-units,
//! enough to add node capacities and compare requests without floating-point drift.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{0:?} is not a Kubernetes quantity")]
pub struct QuantityError(pub String);

/// The quantity in thousandths of its unit (millicores for cpu, millibytes for memory).
pub fn parse_milli(q: &str) -> Result<i128, QuantityError> {
    let s = q.trim();
    let err = || QuantityError(q.to_string());
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    if num.is_empty() {
        return Err(err());
    }
    // exact decimal: integer part and up to 3 + exponent fractional digits
    let (neg, num) = match num.strip_prefix('-') {
        Some(n) => (true, n),
        None => (false, num.strip_prefix('+').unwrap_or(num)),
    };
    let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(err());
    }
    let digits = format!("{int_part}{frac_part}");
    if !digits.chars().all(|c| c.is_ascii_digit()) {
        return Err(err());
    }
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| err())?
    };
    let frac_len = frac_part.len() as i32;
    let (mult, exp10): (i128, i32) = match suffix {
        "" => (1, 0),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1_i128 << 40, 0),
        "Pi" => (1_i128 << 50, 0),
        "Ei" => (1_i128 << 60, 0),
        s if s.starts_with('e') || s.starts_with('E') => {
            let e: i32 = s[1..].parse().map_err(|_| err())?;
            (1, e)
        }
        _ => return Err(err()),
    };
    // value * 1000 = mantissa * mult * 10^(exp10 - frac_len + 3)
    let shift = exp10 - frac_len + 3;
    let mut v = mantissa.checked_mul(mult).ok_or_else(err)?;
    if shift >= 0 {
        v = v
            .checked_mul(10_i128.checked_pow(shift as u32).ok_or_else(err)?)
            .ok_or_else(err)?;
    } else {
        let d = 10_i128.checked_pow((-shift) as u32).ok_or_else(err)?;
        // round up, as Kubernetes does when a quantity is scaled below its precision
        v = (v + d - 1) / d;
    }
    Ok(if neg { -v } else { v })
}

pub fn milli(q: &Quantity) -> Result<i128, QuantityError> {
    parse_milli(&q.0)
}

/// Formats a cpu-like amount: whole units when exact, else millis (`16`, `1500m`).
pub fn format_decimal(milli: i128) -> Quantity {
    if milli % 1000 == 0 {
        Quantity((milli / 1000).to_string())
    } else {
        Quantity(format!("{milli}m"))
    }
}

/// Formats a memory-like amount with the largest exact binary suffix (`64Gi`, `1536Mi`).
pub fn format_binary(milli: i128) -> Quantity {
    if milli % 1000 != 0 {
        return Quantity(format!("{milli}m"));
    }
    let bytes = milli / 1000;
    for (suffix, size) in [
        ("Ei", 1_i128 << 60),
        ("Pi", 1 << 50),
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ] {
        if bytes != 0 && bytes % size == 0 {
            return Quantity(format!("{}{suffix}", bytes / size));
        }
    }
    Quantity(bytes.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_exactly() {
        assert_eq!(parse_milli("500m"), Ok(500));
        assert_eq!(parse_milli("8"), Ok(8000));
        assert_eq!(parse_milli("0.5"), Ok(500));
        assert_eq!(parse_milli("32Gi"), Ok(32 * (1 << 30) * 1000));
        assert_eq!(parse_milli("1k"), Ok(1_000_000));
        assert_eq!(parse_milli("1e3"), Ok(1_000_000));
        assert_eq!(parse_milli("1.5Gi"), Ok(3 * (1 << 29) * 1000));
        assert!(parse_milli("lots").is_err());
        assert!(parse_milli("5Xi").is_err());
    }

    #[test]
    fn sums_format_like_kubernetes() {
        assert_eq!(format_decimal(16_000).0, "16");
        assert_eq!(format_decimal(1_500).0, "1500m");
        assert_eq!(format_binary(64 * (1 << 30) * 1000).0, "64Gi");
        assert_eq!(format_binary(1536 * (1 << 20) * 1000).0, "1536Mi");
        assert_eq!(format_binary(1000 * 1000).0, "1000");
    }
}

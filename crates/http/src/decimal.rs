//! Unsigned integers as decimal text, written without the formatting machinery: the numbers
//! of every status answer and cookie.

/// `value` in decimal (as `Display` writes it), at the end of `digits`.
pub(crate) fn decimal(mut value: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    &digits[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_as_display_does() {
        let mut digits = [0u8; 20];
        for value in [0, 1, 9, 10, 99, 100, 1234, u64::from(u32::MAX), u64::MAX] {
            assert_eq!(decimal(value, &mut digits), value.to_string().as_bytes());
        }
    }
}

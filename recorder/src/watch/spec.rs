//! The text of a `--watch` option: which variable, which bytes of it.

use std::fmt;

/// The largest watch, in bytes: a recorded value is at most one 64-bit word.
pub const MAX_WATCH_SIZE: u32 = 8;

/// What a watch names before it is looked up in the program's files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchTarget {
    /// A global or static variable by name: an ELF symbol (raw or demangled, with
    /// or without its leading path) or a DWARF variable's source name.
    Symbol(String),
    /// A link-time virtual address in the main binary.
    Address(u64),
}

/// A parsed `--watch` argument.
///
/// Forms: `SYMBOL` (the whole variable, at most 8 bytes), `SYMBOL:SIZE`,
/// `SYMBOL+OFFSET:SIZE` (a field: OFFSET bytes from the symbol's start, decimal
/// or `0x` hex) and `0xADDR:SIZE` (a raw link-time address in the main binary).
/// SIZE is decimal, 1 to 8.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchSpec {
    /// The variable or address.
    pub target: WatchTarget,
    /// Bytes from the target's start to the first watched byte.
    pub offset: u64,
    /// Number of watched bytes; `None` means the symbol's whole size.
    pub size: Option<u32>,
}

impl WatchSpec {
    /// Parses a `--watch` argument. Errors are one line saying what is wrong with
    /// it (callers add which option it came from).
    pub fn parse(text: &str) -> Result<WatchSpec, String> {
        let fail = |why: String| why;
        let spec = text.trim();
        if spec.is_empty() {
            return Err(fail(
                "empty; expected SYMBOL, SYMBOL+OFFSET:SIZE or 0xADDR:SIZE".into(),
            ));
        }
        // A size is a trailing `:DIGITS` after a single colon (`a::b` is a path).
        let (rest, size) = match spec.rfind(':') {
            Some(i) if !spec[..i].ends_with(':') && !spec[i + 1..].starts_with(':') => {
                let digits = &spec[i + 1..];
                let size: u32 = digits.parse().map_err(|_| {
                    fail(format!(
                        "SIZE `{digits}` is not a decimal number of bytes (1..={MAX_WATCH_SIZE})"
                    ))
                })?;
                if size == 0 || size > MAX_WATCH_SIZE {
                    return Err(fail(format!(
                        "SIZE {size} is out of range: a watch covers 1..={MAX_WATCH_SIZE} bytes"
                    )));
                }
                (&spec[..i], Some(size))
            }
            _ => (spec, None),
        };
        if rest.is_empty() {
            return Err(fail("missing SYMBOL or 0xADDR before the size".into()));
        }
        if let Some(hex) = rest.strip_prefix("0x").or_else(|| rest.strip_prefix("0X")) {
            let addr = u64::from_str_radix(hex, 16)
                .map_err(|_| fail(format!("`{rest}` is not a hexadecimal address")))?;
            if size.is_none() {
                return Err(fail("a raw address needs a size: 0xADDR:SIZE".into()));
            }
            return Ok(WatchSpec {
                target: WatchTarget::Address(addr),
                offset: 0,
                size,
            });
        }
        let (symbol, offset) = match rest.rfind('+') {
            Some(i) => {
                let off_text = &rest[i + 1..];
                let offset = parse_number(off_text).ok_or_else(|| {
                    fail(format!(
                        "OFFSET `{off_text}` is not a number (decimal or 0x hex)"
                    ))
                })?;
                if size.is_none() {
                    return Err(fail("a field needs a size: SYMBOL+OFFSET:SIZE".into()));
                }
                (&rest[..i], offset)
            }
            None => (rest, 0),
        };
        if symbol.is_empty() {
            return Err(fail("missing SYMBOL before `+OFFSET`".into()));
        }
        if let Some(bad) = symbol.chars().find(|c| c.is_whitespace() || c.is_control()) {
            return Err(fail(format!("{bad:?} cannot appear in a symbol name")));
        }
        if symbol.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(fail(format!(
                "`{symbol}` is neither a symbol name nor a 0x address"
            )));
        }
        Ok(WatchSpec {
            target: WatchTarget::Symbol(symbol.to_string()),
            offset,
            size,
        })
    }
}

/// A decimal or `0x` hexadecimal number.
pub(crate) fn parse_number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

impl fmt::Display for WatchSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            WatchTarget::Symbol(name) => f.write_str(name)?,
            WatchTarget::Address(addr) => write!(f, "{addr:#x}")?,
        }
        if self.offset != 0 {
            write!(f, "+{}", self.offset)?;
        }
        if let Some(size) = self.size {
            write!(f, ":{size}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for WatchSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<WatchSpec, String> {
        WatchSpec::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn symbol(name: &str, offset: u64, size: Option<u32>) -> WatchSpec {
        WatchSpec {
            target: WatchTarget::Symbol(name.into()),
            offset,
            size,
        }
    }

    #[test]
    fn parses_every_form() {
        assert_eq!(
            WatchSpec::parse("counter").unwrap(),
            symbol("counter", 0, None)
        );
        assert_eq!(
            WatchSpec::parse("counter:4").unwrap(),
            symbol("counter", 0, Some(4))
        );
        assert_eq!(
            WatchSpec::parse("state+8:4").unwrap(),
            symbol("state", 8, Some(4))
        );
        assert_eq!(
            WatchSpec::parse("state+0x10:8").unwrap(),
            symbol("state", 16, Some(8))
        );
        assert_eq!(
            WatchSpec::parse("prog::COUNTER").unwrap(),
            symbol("prog::COUNTER", 0, None)
        );
        assert_eq!(
            WatchSpec::parse("a::b::C+4:2").unwrap(),
            symbol("a::b::C", 4, Some(2))
        );
        assert_eq!(
            WatchSpec::parse("calls.0").unwrap(),
            symbol("calls.0", 0, None)
        );
        assert_eq!(
            WatchSpec::parse("0x4010:4").unwrap(),
            WatchSpec {
                target: WatchTarget::Address(0x4010),
                offset: 0,
                size: Some(4)
            }
        );
    }

    #[test]
    fn displays_back_to_an_equivalent_spec() {
        for text in [
            "counter",
            "counter:4",
            "state+8:4",
            "a::b::C+4:2",
            "0x4010:1",
        ] {
            let spec = WatchSpec::parse(text).unwrap();
            assert_eq!(WatchSpec::parse(&spec.to_string()).unwrap(), spec, "{text}");
        }
        assert_eq!(
            WatchSpec::parse("state+0x10:8").unwrap().to_string(),
            "state+16:8"
        );
    }

    #[test]
    fn rejects_bad_sizes() {
        for (text, needle) in [
            ("counter:0", "SIZE 0 is out of range"),
            ("counter:9", "SIZE 9 is out of range"),
            ("counter:16", "SIZE 16 is out of range"),
            ("counter:four", "SIZE `four` is not a decimal number"),
            ("counter:", "SIZE `` is not"),
            ("0x4010:-1", "SIZE `-1`"),
        ] {
            let err = WatchSpec::parse(text).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
            assert!(!err.contains('\n'));
        }
    }

    #[test]
    fn rejects_bad_syntax() {
        for (text, needle) in [
            ("", "empty"),
            ("   ", "empty"),
            (":4", "missing SYMBOL"),
            ("+8:4", "missing SYMBOL before"),
            ("state+8", "a field needs a size"),
            ("state+x:4", "OFFSET `x` is not a number"),
            ("0x4010", "a raw address needs a size"),
            ("0xzz:4", "`0xzz` is not a hexadecimal address"),
            ("4010:4", "neither a symbol name nor a 0x address"),
            ("my var", "cannot appear in a symbol name"),
        ] {
            let err = WatchSpec::parse(text).unwrap_err();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }
}

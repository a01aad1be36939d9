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

/// One step from a variable to a part of it, as written in C (`.field`,
/// `->field`, `[index]`), followed through the variable's DWARF type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldStep {
    /// `.name`: a member of the struct, class or union.
    Member(String),
    /// `->name`: a member of the struct the pointer points to (the pointer's value
    /// is read while the program runs).
    Deref(String),
    /// `[n]`: an element of the array.
    Index(u64),
}

/// A parsed `--watch` argument.
///
/// Forms: `SYMBOL` (the whole variable, at most 8 bytes), `SYMBOL:SIZE`,
/// `SYMBOL+OFFSET:SIZE` (OFFSET bytes from the symbol's start, decimal or `0x`
/// hex), `SYMBOL.field`, `SYMBOL.a.b`, `SYMBOL[2]`, `SYMBOL->field` (through the
/// variable's DWARF type), `FILE:SYMBOL` (the one defined in source file FILE,
/// when several share the name) and `0xADDR:SIZE` (a raw link-time address in the
/// main binary). SIZE is decimal, 1 to 8.
///
/// SYMBOL is any name `nm -C` prints: C++ paths with anonymous namespaces
/// (`(anonymous namespace)::hits`), template arguments (`ns::holder<int, 3>::value`)
/// and operators (`ns::operator+=(X const&)::calls`), Rust paths
/// (`crate::module::STATIC`), or a raw mangled name. Colons, plus signs, dots and
/// brackets inside `<…>`, `(…)`, `[…]`, `{…}` or an operator's name are part of
/// the name, never a size, offset or field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchSpec {
    /// The variable or address.
    pub target: WatchTarget,
    /// Bytes from the target's start to the first watched byte (after `fields`).
    pub offset: u64,
    /// Number of watched bytes; `None` means the symbol's whole size.
    pub size: Option<u32>,
    /// The source file (`file.c`, or a trailing part of its path) that defines the
    /// variable, when the name alone is ambiguous.
    pub file: Option<String>,
    /// Fields, elements and pointer dereferences from the variable to the bytes watched.
    pub fields: Vec<FieldStep>,
}

/// C++ operator names, longest first: characters in them are part of the name.
const OPERATORS: &[&str] = &[
    "delete[]", "new[]", "delete", "new", "->*", "<=>", "<<=", ">>=", "()", "[]", "->", "<<", ">>",
    "<=", ">=", "==", "!=", "&&", "||", "++", "--", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=",
    "\"\"", "+", "-", "*", "/", "%", "^", "&", "|", "~", "!", "=", "<", ">", ",",
];

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$'
}

/// Byte offsets of the characters of `text` that are outside every bracket pair
/// and every operator name: only these can start a size, offset, file or field.
fn top_level(text: &str) -> Vec<(usize, char)> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        let c = rest.chars().next().expect("in bounds");
        // `operator<`, `operator()`, `operator->`: skip the operator's own characters.
        if rest.starts_with("operator")
            && !text[..i].ends_with(is_ident_char)
            && !rest["operator".len()..].starts_with(is_ident_char)
        {
            let after = &rest["operator".len()..];
            let spaces = after.len() - after.trim_start().len();
            let op = OPERATORS
                .iter()
                .find(|op| after.trim_start().starts_with(*op))
                .map_or(0, |op| op.len());
            i += "operator".len() + spaces + op;
            continue;
        }
        match c {
            '-' if depth == 0 && rest.starts_with("->") => {
                out.push((i, c));
                i += 2;
                continue;
            }
            '(' | '<' | '{' => depth += 1,
            // `[abi:cxx11]` is part of a name; `[2]` at the top level is an element.
            '[' if depth > 0 || rest.starts_with("[abi:") => depth += 1,
            ')' | '>' | '}' | ']' if depth > 0 => depth -= 1,
            _ if depth == 0 => out.push((i, c)),
            _ => {}
        }
        i += c.len_utf8();
    }
    out
}

/// The top-level single colons (not part of `::`).
fn single_colons(text: &str, top: &[(usize, char)]) -> Vec<usize> {
    top.iter()
        .filter(|(i, c)| *c == ':' && !text[..*i].ends_with(':') && !text[i + 1..].starts_with(':'))
        .map(|(i, _)| *i)
        .collect()
}

/// Whether `text` reads as a source file (`main.c`, `src/lib.rs`): a FILE: prefix.
fn looks_like_file(text: &str) -> bool {
    !text.is_empty()
        && (text.contains('.') || text.contains('/'))
        && !text.contains(char::is_whitespace)
        && !text.contains("::")
        && !text.starts_with("0x")
}

impl WatchSpec {
    /// Parses a `--watch` argument. Errors are one line saying what is wrong with
    /// it (callers add which option it came from).
    pub fn parse(text: &str) -> Result<WatchSpec, String> {
        let spec = text.trim();
        if spec.is_empty() {
            return Err("empty; expected SYMBOL, SYMBOL+OFFSET:SIZE or 0xADDR:SIZE".into());
        }
        if let Some(bad) = spec.chars().find(|c| c.is_control()) {
            return Err(format!("{bad:?} cannot appear in a symbol name"));
        }
        // `file.c:name`: a leading single colon after something that reads as a file
        // (and not followed by a size).
        let mut file = None;
        let mut rest = spec;
        let top = top_level(rest);
        if let Some(&colon) = single_colons(rest, &top).first() {
            let (head, tail) = (&rest[..colon], &rest[colon + 1..]);
            if looks_like_file(head) && !tail.bytes().all(|b| b.is_ascii_digit()) {
                file = Some(head.to_string());
                rest = tail.trim_start();
                if rest.is_empty() {
                    return Err(format!("missing SYMBOL after `{head}:`"));
                }
            }
        }
        // A size is the text after the last top-level single colon.
        let top = top_level(rest);
        let (rest, size) = match single_colons(rest, &top).last() {
            Some(&i) => {
                let digits = &rest[i + 1..];
                let size: u32 = digits.parse().map_err(|_| {
                    format!(
                        "SIZE `{digits}` is not a decimal number of bytes (1..={MAX_WATCH_SIZE})"
                    )
                })?;
                if size == 0 || size > MAX_WATCH_SIZE {
                    return Err(format!(
                        "SIZE {size} is out of range: a watch covers 1..={MAX_WATCH_SIZE} bytes"
                    ));
                }
                (rest[..i].trim_end(), Some(size))
            }
            None => (rest, None),
        };
        if rest.is_empty() {
            return Err("missing SYMBOL or 0xADDR before the size".into());
        }
        if let Some(hex) = rest.strip_prefix("0x").or_else(|| rest.strip_prefix("0X")) {
            let addr = u64::from_str_radix(hex, 16)
                .map_err(|_| format!("`{rest}` is not a hexadecimal address"))?;
            if size.is_none() {
                return Err("a raw address needs a size: 0xADDR:SIZE".into());
            }
            if file.is_some() {
                return Err("a raw address cannot have a FILE: prefix".into());
            }
            return Ok(WatchSpec {
                target: WatchTarget::Address(addr),
                offset: 0,
                size,
                file: None,
                fields: Vec::new(),
            });
        }
        let (name, offset) = split_offset(rest)?;
        if offset.is_some() && size.is_none() {
            return Err("a field needs a size: SYMBOL+OFFSET:SIZE".into());
        }
        let offset = offset.unwrap_or(0);
        if name.is_empty() {
            return Err("missing SYMBOL before `+OFFSET`".into());
        }
        let (symbol, fields) = split_fields(name)?;
        if symbol.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(format!(
                "`{symbol}` is neither a symbol name nor a 0x address"
            ));
        }
        Ok(WatchSpec {
            target: WatchTarget::Symbol(symbol.to_string()),
            offset,
            size,
            file,
            fields,
        })
    }
}

/// Splits a trailing `+OFFSET` (decimal or `0x` hex) off a name as `nm -C`
/// prints it: a `+` inside brackets or an operator's name (`operator+`,
/// `operator+=`) is part of the name. For anything that names a place by symbol
/// and offset (`--watch`, `function+0x1c` code locations).
pub fn split_offset(text: &str) -> Result<(&str, Option<u64>), String> {
    match top_level(text).iter().rev().find(|(_, c)| *c == '+') {
        Some(&(i, _)) => {
            let off_text = text[i + 1..].trim();
            let offset = parse_number(off_text).ok_or_else(|| {
                format!("OFFSET `{off_text}` is not a number (decimal or 0x hex)")
            })?;
            Ok((text[..i].trim_end(), Some(offset)))
        }
        None => Ok((text, None)),
    }
}

/// Splits `name.a->b[2]` into the variable's name and the steps after it. A dot
/// followed by a digit is part of the name (GCC's `calls.0` for local statics), as
/// is anything that does not read as a chain of steps.
fn split_fields(name: &str) -> Result<(&str, Vec<FieldStep>), String> {
    let top = top_level(name);
    let start = top.iter().find(|(i, c)| match c {
        '.' => name[i + 1..].starts_with(|c: char| c.is_alphabetic() || c == '_'),
        '-' | '[' => true,
        _ => false,
    });
    let Some(&(start, _)) = start else {
        return Ok((name, Vec::new()));
    };
    let symbol = name[..start].trim_end();
    let mut steps = Vec::new();
    let mut rest = &name[start..];
    while !rest.is_empty() {
        let ident =
            |text: &str| -> usize { text.find(|c: char| !is_ident_char(c)).unwrap_or(text.len()) };
        if let Some(after) = rest.strip_prefix('.').or_else(|| rest.strip_prefix("->")) {
            let n = ident(after);
            if n == 0 || after.starts_with(|c: char| c.is_ascii_digit()) {
                // `name.lto_priv.0` and the like: a compiler-made name, not fields.
                return Ok((name, Vec::new()));
            }
            let member = after[..n].to_string();
            steps.push(if rest.starts_with('.') {
                FieldStep::Member(member)
            } else {
                FieldStep::Deref(member)
            });
            rest = &after[n..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let close = after
                .find(']')
                .ok_or_else(|| format!("`{rest}`: `[` without a closing `]`"))?;
            let index = parse_number(after[..close].trim()).ok_or_else(|| {
                format!(
                    "INDEX `{}` is not a number (decimal or 0x hex)",
                    &after[..close]
                )
            })?;
            steps.push(FieldStep::Index(index));
            rest = &after[close + 1..];
        } else {
            return Err(format!(
                "`{rest}` after `{symbol}` is not a field (.name, ->name) or an element ([n])"
            ));
        }
    }
    if symbol.is_empty() {
        return Err(format!("missing SYMBOL before `{}`", &name[start..]));
    }
    Ok((symbol, steps))
}

/// A decimal or `0x` hexadecimal number.
pub(crate) fn parse_number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

impl fmt::Display for FieldStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldStep::Member(name) => write!(f, ".{name}"),
            FieldStep::Deref(name) => write!(f, "->{name}"),
            FieldStep::Index(index) => write!(f, "[{index}]"),
        }
    }
}

impl fmt::Display for WatchSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{file}:")?;
        }
        match &self.target {
            WatchTarget::Symbol(name) => f.write_str(name)?,
            WatchTarget::Address(addr) => write!(f, "{addr:#x}")?,
        }
        for step in &self.fields {
            write!(f, "{step}")?;
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
            file: None,
            fields: Vec::new(),
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
                size: Some(4),
                file: None,
                fields: Vec::new(),
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
            ("my\tvar", "cannot appear in a symbol name"),
            ("main.c:", "SIZE `` is not"),
            ("main.c: ", "SIZE `` is not"),
            ("obj.a[x]", "INDEX `x` is not a number"),
            ("obj[2", "without a closing"),
            ("obj.a b", "is not a field"),
        ] {
            let err = WatchSpec::parse(text).unwrap_err();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn names_as_nm_prints_them() {
        for (text, name, offset, size) in [
            (
                "(anonymous namespace)::hits",
                "(anonymous namespace)::hits",
                0,
                None,
            ),
            (
                "(anonymous namespace)::hits:4",
                "(anonymous namespace)::hits",
                0,
                Some(4),
            ),
            (
                "ns::holder<int, 3>::value",
                "ns::holder<int, 3>::value",
                0,
                None,
            ),
            (
                "ns::holder<int, 3>::value+4:2",
                "ns::holder<int, 3>::value",
                4,
                Some(2),
            ),
            (
                "ns::holder<std::pair<int, long>, 3>::value:8",
                "ns::holder<std::pair<int, long>, 3>::value",
                0,
                Some(8),
            ),
            (
                "ns::operator+(ns::V, ns::V)::calls",
                "ns::operator+(ns::V, ns::V)::calls",
                0,
                None,
            ),
            (
                "ns::operator+=(ns::V const&)::calls:4",
                "ns::operator+=(ns::V const&)::calls",
                0,
                Some(4),
            ),
            (
                "operator<(A const&, A const&)::n",
                "operator<(A const&, A const&)::n",
                0,
                None,
            ),
            (
                "ns::operator<< <int>(int)::n+1:1",
                "ns::operator<< <int>(int)::n",
                1,
                Some(1),
            ),
            ("ns::operator->()::n", "ns::operator->()::n", 0, None),
            ("ns::operator()()::n", "ns::operator()()::n", 0, None),
            (
                "ns::operator[](unsigned long)::n",
                "ns::operator[](unsigned long)::n",
                0,
                None,
            ),
            (
                "ns::operator new(unsigned long)::n",
                "ns::operator new(unsigned long)::n",
                0,
                None,
            ),
            (
                "ns::S::operator int()::n:4",
                "ns::S::operator int()::n",
                0,
                Some(4),
            ),
            ("bump(int)::calls", "bump(int)::calls", 0, None),
            (
                "main::{lambda()#1}::operator()() const::n",
                "main::{lambda()#1}::operator()() const::n",
                0,
                None,
            ),
            ("ns::name[abi:cxx11]", "ns::name[abi:cxx11]", 0, None),
            ("crate::module::STATIC", "crate::module::STATIC", 0, None),
            ("name.lto_priv.0", "name.lto_priv.0", 0, None),
            (
                "_ZN2ns6holderIiLi3EE5valueE",
                "_ZN2ns6holderIiLi3EE5valueE",
                0,
                None,
            ),
            ("operator_count", "operator_count", 0, None),
        ] {
            let spec = WatchSpec::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(spec, symbol(name, offset, size), "{text}");
            assert_eq!(WatchSpec::parse(&spec.to_string()).unwrap(), spec, "{text}");
        }
    }

    #[test]
    fn offsets_split_off_names_with_operators() {
        assert_eq!(split_offset("main+0x1c").unwrap(), ("main", Some(0x1c)));
        assert_eq!(
            split_offset("ns::V::operator+=(ns::V const&)+12").unwrap(),
            ("ns::V::operator+=(ns::V const&)", Some(12))
        );
        assert_eq!(
            split_offset("ns::operator+(ns::V, ns::V)").unwrap(),
            ("ns::operator+(ns::V, ns::V)", None)
        );
        assert!(split_offset("f+x").unwrap_err().contains("OFFSET `x`"));
    }

    #[test]
    fn fields_elements_and_files() {
        let spec = WatchSpec::parse("obj.a.b").unwrap();
        assert_eq!(spec.target, WatchTarget::Symbol("obj".into()));
        assert_eq!(
            spec.fields,
            vec![FieldStep::Member("a".into()), FieldStep::Member("b".into())]
        );
        let spec = WatchSpec::parse("table[2].count:4").unwrap();
        assert_eq!(
            spec.fields,
            vec![FieldStep::Index(2), FieldStep::Member("count".into())]
        );
        assert_eq!(spec.size, Some(4));
        let spec = WatchSpec::parse("ns::holder<int, 3>::current->users").unwrap();
        assert_eq!(
            spec.target,
            WatchTarget::Symbol("ns::holder<int, 3>::current".into())
        );
        assert_eq!(spec.fields, vec![FieldStep::Deref("users".into())]);
        let spec = WatchSpec::parse("watch_static.c:counter").unwrap();
        assert_eq!(spec.file.as_deref(), Some("watch_static.c"));
        assert_eq!(spec.target, WatchTarget::Symbol("counter".into()));
        let spec = WatchSpec::parse("src/a.c:(anonymous namespace)::hits.x:4").unwrap();
        assert_eq!(spec.file.as_deref(), Some("src/a.c"));
        assert_eq!(
            spec.target,
            WatchTarget::Symbol("(anonymous namespace)::hits".into())
        );
        assert_eq!(spec.fields, vec![FieldStep::Member("x".into())]);
        assert_eq!(spec.size, Some(4));
        for text in ["obj.a->b[3]:2", "a.c:ptr->f", "arr[1]+2:2"] {
            let spec = WatchSpec::parse(text).unwrap();
            assert_eq!(spec.to_string(), text);
        }
        // A name with a dot and digits is a size, not a file: `calls.0:4`.
        let spec = WatchSpec::parse("calls.0:4").unwrap();
        assert_eq!(spec, symbol("calls.0", 0, Some(4)));
    }
}

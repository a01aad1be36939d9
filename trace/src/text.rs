//! Strings from a trace, made safe to print: thread names, module paths and the
//! command line come from the traced program, which may put terminal escape
//! sequences in them (`prctl(PR_SET_NAME, "\e]0;...")`). Everything ordo prints
//! from a trace goes through [`escape`].

use std::borrow::Cow;

/// Whether `c` must not reach a terminal as is: control characters (C0, DEL, C1)
/// and the Unicode bidirectional overrides that reorder what is displayed.
fn unsafe_char(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with control characters written as `\xNN` (or `\u{NNNN}`), and backslashes
/// doubled when anything was escaped so the result stays unambiguous. Unchanged
/// (and not copied) when there is nothing to escape.
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if unsafe_char(c) && (c as u32) < 0x100 => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if unsafe_char(c) => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn escapes_control_characters_and_leaves_the_rest() {
        assert!(matches!(
            escape("worker-1 ü"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(escape("a\x1b]0;pwned\x07b"), "a\\x1b]0;pwned\\x07b");
        assert_eq!(escape("x\u{9b}31m\\"), "x\\x9b31m\\\\");
        assert_eq!(escape("\u{202e}evil"), "\\u{202e}evil");
        assert_eq!(escape("tab\there\n"), "tab\\x09here\\x0a");
    }
}

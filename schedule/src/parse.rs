//! Schedule text to [`Schedule`], with errors that point at a line and column.
//!
//! ```text
//! schedule = { line "\n" }
//! line     = [ ordering ] [ "#" comment ]
//! ordering = event { "&&" event } "->" event
//! event    = thread ":" kind "(" object ")" "#" occurrence
//!          | thread ":" "after(" kind "(" object ")" "#" occurrence ")"
//!          | "after(" thread ":" kind "(" object ")" "#" occurrence ")"
//! thread   = "0" | n { "." n } | "*"      (n ≥ 1; `*` only after `->`)
//! kind     = a trace kind name            (mutex_lock, cond_signal, …)
//! object   = "" | "@" k | symbol [ "+" offset ]
//! ```
//!
//! A symbol is any text with balanced parentheses (C++ names like `f(int)::x` are
//! allowed); whitespace is allowed between tokens but not inside an event outside the
//! object.

use std::fmt;

use ordo_trace::{Kind, LogicalId};

use crate::{EventRef, Family, ObjectRef, Ordering, Schedule, ThreadRef};

/// A schedule that does not parse: where, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

impl std::error::Error for ParseError {}

pub(crate) fn parse_schedule(text: &str) -> Result<Schedule, ParseError> {
    let mut orderings = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let mut p = LineParser::new(line, i + 1);
        if let Some(o) = p.ordering()? {
            orderings.push(o);
        }
    }
    Ok(Schedule { orderings })
}

pub(crate) fn parse_event_text(text: &str) -> Result<EventRef, ParseError> {
    let mut p = LineParser::new(text, 1);
    p.skip_ws();
    let e = p.event()?;
    p.skip_ws();
    if !p.at_end() {
        return Err(p.error("unexpected text after the event"));
    }
    Ok(e)
}

struct LineParser<'a> {
    chars: Vec<char>,
    pos: usize,
    line: usize,
    _text: &'a str,
}

impl<'a> LineParser<'a> {
    fn new(text: &'a str, line: usize) -> LineParser<'a> {
        LineParser {
            chars: text.chars().collect(),
            pos: 0,
            line,
            _text: text,
        }
    }

    fn error_at(&self, pos: usize, message: impl Into<String>) -> ParseError {
        ParseError {
            line: self.line,
            column: pos + 1,
            message: message.into(),
        }
    }

    fn error(&self, message: impl Into<String>) -> ParseError {
        self.error_at(self.pos, message)
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn at_end(&self) -> bool {
        self.pos >= self.chars.len()
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
    }

    /// True at the end of the line or at a comment.
    fn at_line_end(&mut self) -> bool {
        self.skip_ws();
        self.at_end() || self.peek() == Some('#')
    }

    fn eat(&mut self, s: &str) -> bool {
        let n = s.chars().count();
        if self.chars.len() >= self.pos + n
            && self.chars[self.pos..self.pos + n]
                .iter()
                .copied()
                .eq(s.chars())
        {
            self.pos += n;
            true
        } else {
            false
        }
    }

    fn ordering(&mut self) -> Result<Option<Ordering>, ParseError> {
        if self.at_line_end() {
            return Ok(None);
        }
        let mut before = vec![self.before_event()?];
        loop {
            self.skip_ws();
            if self.eat("&&") {
                self.skip_ws();
                before.push(self.before_event()?);
            } else if self.eat("->") {
                self.skip_ws();
                break;
            } else if self.at_line_end() {
                return Err(
                    self.error("expected `&&` or `->` after the event (an ordering is `A -> B`)")
                );
            } else {
                return Err(self.error("expected `&&` or `->`"));
            }
        }
        if self.at_line_end() {
            return Err(self.error("expected an event after `->`"));
        }
        let after_pos = self.pos;
        let after = self.event()?;
        if !self.at_line_end() {
            let msg = if self.eat("->") {
                self.pos -= 2;
                "one ordering per line: split `A -> B -> C` into `A -> B` and `B -> C`"
            } else {
                "unexpected text after the ordering"
            };
            return Err(self.error(msg));
        }
        if before.contains(&after) {
            return Err(self.error_at(after_pos, format!("`{after}` cannot happen before itself")));
        }
        Ok(Some(Ordering {
            before,
            after,
            line: self.line,
        }))
    }

    /// An event left of `->`: `*` names successors only.
    fn before_event(&mut self) -> Result<EventRef, ParseError> {
        let start = self.pos;
        let e = self.event()?;
        if e.thread.is_others() {
            return Err(self.error_at(
                start,
                "`*` only names successors: write it right of `->` (`A -> *:KIND(OBJ)#N`)",
            ));
        }
        Ok(e)
    }

    fn number(&mut self, what: &str) -> Result<u32, ParseError> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.error(format!("expected {what}")));
        }
        let text: String = self.chars[start..self.pos].iter().collect();
        text.parse()
            .map_err(|_| self.error_at(start, format!("{what} `{text}` is too large")))
    }

    /// `THREAD:KIND(OBJ)#N`, `THREAD:after(KIND(OBJ)#N)`, or the same point
    /// spelled `after(THREAD:KIND(OBJ)#N)`.
    fn event(&mut self) -> Result<EventRef, ParseError> {
        if self.eat("after(") {
            self.skip_ws();
            let mut e = self.plain_event()?;
            self.skip_ws();
            if !self.eat(")") {
                return Err(self.error("expected `)` closing `after(`"));
            }
            if e.thread.is_others() {
                return Err(self.error("`after(…)` names one thread's event, not `*`"));
            }
            self.check_after(&e)?;
            e.after = true;
            return Ok(e);
        }
        self.plain_event()
    }

    fn check_after(&self, e: &EventRef) -> Result<(), ParseError> {
        if crate::after_supported(e.kind) {
            return Ok(());
        }
        Err(self.error(format!(
            "`after({}(…))`: no point after a `{}` can be held (after() takes an interposed call that returns: a lock, unlock, signal, post, create, join, cond_wait, barrier_wait, futex call)",
            e.kind.name(),
            e.kind.name()
        )))
    }

    fn plain_event(&mut self) -> Result<EventRef, ParseError> {
        // Thread id.
        let start = self.pos;
        let thread = if self.eat("*") {
            ThreadRef::Others
        } else {
            while self.peek().is_some_and(|c| c.is_ascii_digit() || c == '.') {
                self.pos += 1;
            }
            if start == self.pos {
                return Err(self.error("expected an event `THREAD:KIND(OBJECT)#N` (THREAD is a logical id like 0, 2 or 1.3, or `*` after `->`)"));
            }
            let text: String = self.chars[start..self.pos].iter().collect();
            let id: LogicalId = text.parse().map_err(|e: String| self.error_at(start, e))?;
            ThreadRef::Id(id)
        };
        if !self.eat(":") {
            return Err(self.error("expected `:` after the thread id"));
        }
        if self.eat("after(") {
            self.skip_ws();
            let mut e = self.kind_object_occurrence(thread)?;
            self.skip_ws();
            if !self.eat(")") {
                return Err(self.error("expected `)` closing `after(`"));
            }
            if e.thread.is_others() {
                return Err(self.error_at(start, "`after(…)` names one thread's event, not `*`"));
            }
            self.check_after(&e)?;
            e.after = true;
            return Ok(e);
        }
        self.kind_object_occurrence(thread)
    }

    /// `KIND(OBJECT)#N`, for the thread already read.
    fn kind_object_occurrence(&mut self, thread: ThreadRef) -> Result<EventRef, ParseError> {
        // Kind.
        let kind_start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            self.pos += 1;
        }
        let name: String = self.chars[kind_start..self.pos].iter().collect();
        if name.is_empty() {
            return Err(self.error("expected an event kind (mutex_lock, cond_signal, …)"));
        }
        let kind = Kind::from_name(&name).ok_or_else(|| {
            let known: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
            self.error_at(
                kind_start,
                format!("unknown event kind `{name}` (known: {})", known.join(", ")),
            )
        })?;
        if !self.eat("(") {
            return Err(self.error(format!("expected `(` after `{name}`")));
        }
        // Object: up to the matching `)`.
        let obj_start = self.pos;
        let mut depth = 0usize;
        loop {
            match self.peek() {
                None => return Err(self.error_at(obj_start - 1, "unclosed `(`")),
                Some('(') => depth += 1,
                Some(')') if depth == 0 => break,
                Some(')') => depth -= 1,
                _ => {}
            }
            self.pos += 1;
        }
        let raw: String = self.chars[obj_start..self.pos].iter().collect();
        self.pos += 1; // `)`
        let object_text = raw.trim();
        let object = if object_text.is_empty() {
            ObjectRef::None
        } else if let Some(k) = object_text.strip_prefix('@') {
            match k.parse::<u32>() {
                Ok(k) if k >= 1 => ObjectRef::Nth(k),
                _ => {
                    return Err(self.error_at(
                        obj_start,
                        format!("`@{k}`: expected `@K` with K ≥ 1 (the thread's K-th object)"),
                    ))
                }
            }
        } else {
            ObjectRef::Symbol(object_text.to_string())
        };
        match (Family::of(kind), &object) {
            (Family::NoObject, ObjectRef::None) => {}
            (Family::NoObject, _) => {
                return Err(self.error_at(
                    obj_start,
                    format!("`{name}` takes no object: write `{name}()`"),
                ));
            }
            (_, ObjectRef::None) => {
                return Err(self.error_at(
                    obj_start,
                    format!("`{name}` needs an object: a symbol name or `@K`"),
                ));
            }
            _ => {}
        }
        if !self.eat("#") {
            return Err(self.error("expected `#N` (the occurrence, 1-based) after the object"));
        }
        let occ_start = self.pos;
        let occurrence = self.number("an occurrence number after `#`")?;
        if occurrence == 0 {
            return Err(self.error_at(occ_start, "occurrences count from 1"));
        }
        Ok(EventRef {
            thread,
            kind,
            object,
            occurrence,
            after: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> ParseError {
        Schedule::parse(text).expect_err("must not parse")
    }

    #[test]
    fn parses_the_examples() {
        let text = "# the consumer must take the lock before the producer publishes\n\
                    1:mutex_lock(queue_lock)#1 -> 2:mutex_lock(queue_lock)#1\n\
                    \n\
                    1:mutex_unlock(@1)#2 && 2:cond_wait_begin(ready)#1 -> 0:cond_signal(ready)#1  # trailing\n\
                    1.3:thread_start()#1 -> 0:mutex_unlock(state+8)#12\n";
        let s = Schedule::parse(text).unwrap();
        assert_eq!(s.orderings.len(), 3);
        let o = &s.orderings[1];
        assert_eq!(o.line, 4);
        assert_eq!(o.before.len(), 2);
        assert_eq!(o.before[0].object, ObjectRef::Nth(1));
        assert_eq!(o.before[0].occurrence, 2);
        assert_eq!(o.after.thread, LogicalId::main());
        assert_eq!(o.after.thread.id(), Some(&LogicalId::main()));
        assert_eq!(o.after.kind, Kind::CondSignal);
        let third = &s.orderings[2];
        assert_eq!(third.before[0].thread, LogicalId(vec![1, 3]));
        assert_eq!(third.before[0].object, ObjectRef::None);
        assert_eq!(third.after.object.symbol_parts(), Some(("state", 8)));
        assert_eq!(third.after.occurrence, 12);
        // Display gives text that parses to the same orderings (lines aside).
        let again = Schedule::parse(&s.to_string()).unwrap();
        let strip = |s: &Schedule| {
            s.orderings
                .iter()
                .map(|o| (o.before.clone(), o.after.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(strip(&again), strip(&s));
        assert_eq!(
            s.orderings[0].to_string(),
            "1:mutex_lock(queue_lock)#1 -> 2:mutex_lock(queue_lock)#1"
        );
    }

    #[test]
    fn star_names_every_other_thread_as_successor() {
        let s = Schedule::parse(
            "1:mutex_unlock(m)#1 -> *:mutex_lock(m)#1\n\
             1:mutex_unlock(@2)#3 && 2.1:sem_post(s)#1 -> *:thread_start()#1 # all later starts\n",
        )
        .unwrap();
        assert_eq!(s.orderings.len(), 2);
        assert_eq!(s.orderings[0].after.thread, ThreadRef::Others);
        assert!(s.orderings[0].after.thread.id().is_none());
        assert_eq!(
            s.orderings[1].before_threads(),
            [&LogicalId(vec![1]), &LogicalId(vec![2, 1])]
        );
        assert_eq!(
            s.to_string(),
            "1:mutex_unlock(m)#1 -> *:mutex_lock(m)#1\n\
             1:mutex_unlock(@2)#3 && 2.1:sem_post(s)#1 -> *:thread_start()#1\n"
        );
        assert_eq!(Schedule::parse(&s.to_string()).unwrap().orderings[0], {
            let mut o = s.orderings[0].clone();
            o.line = 1;
            o
        });
        // `*` on the left is an error pointing at it.
        let e = err("*:mutex_lock(m)#1 -> 1:mutex_lock(m)#1");
        assert_eq!((e.line, e.column), (1, 1));
        assert_eq!(
            e.to_string(),
            "1:1: `*` only names successors: write it right of `->` (`A -> *:KIND(OBJ)#N`)"
        );
        let e = err("1:mutex_lock(m)#1 && *:sem_post(s)#1 -> 2:mutex_lock(m)#1");
        assert_eq!((e.line, e.column), (1, 22));
        assert!(err("1:mutex_lock(m)#1 -> **:mutex_lock(m)#1")
            .message
            .contains("expected `:`"));
    }

    #[test]
    fn cpp_symbols_with_parentheses() {
        let s = Schedule::parse("1:mutex_lock(f(int)::m)#1 -> 2:mutex_lock(ns::g)#1").unwrap();
        assert_eq!(
            s.orderings[0].before[0].object,
            ObjectRef::Symbol("f(int)::m".into())
        );
        assert_eq!(
            s.orderings[0].before[0].object.symbol_parts(),
            Some(("f(int)::m", 0))
        );
    }

    #[test]
    fn errors_point_at_line_and_column() {
        let e = err("\n1:mutex_lok(m)#1 -> 2:mutex_lock(m)#1");
        assert_eq!((e.line, e.column), (2, 3));
        assert!(e.message.contains("unknown event kind `mutex_lok`"), "{e}");

        let e = err("1:mutex_lock(m)#1 2:mutex_lock(m)#1");
        assert_eq!((e.line, e.column), (1, 19));

        let e = err("1:mutex_lock(m)#0 -> 2:mutex_lock(m)#1");
        assert_eq!((e.line, e.column), (1, 17));

        let e = err("1:mutex_lock(m)#1 ->");
        assert!(e.message.contains("expected an event after `->`"), "{e}");

        let e = err("1:thread_start(x)#1 -> 2:mutex_lock(m)#1");
        assert!(e.message.contains("takes no object"), "{e}");

        let e = err("1:mutex_lock()#1 -> 2:mutex_lock(m)#1");
        assert!(e.message.contains("needs an object"), "{e}");

        let e = err("1.0:mutex_lock(m)#1 -> 2:mutex_lock(m)#1");
        assert_eq!((e.line, e.column), (1, 1));

        let e = err("1:mutex_lock(@0)#1 -> 2:mutex_lock(m)#1");
        assert_eq!((e.line, e.column), (1, 14));

        let e = err("1:mutex_lock(m#1 -> 2:mutex_lock(m)#1");
        assert!(e.message.contains("unclosed"), "{e}");

        let e = err("1:mutex_lock(m)#1 -> 2:mutex_lock(m)#1 -> 3:mutex_lock(m)#1");
        assert!(e.message.contains("one ordering per line"), "{e}");
        assert_eq!(e.column, 40);

        let e = err("1:mutex_lock(m)#1 -> 1:mutex_lock(m)#1");
        assert!(e.message.contains("before itself"), "{e}");

        let e = err("1:mutex_lock(m) -> 2:mutex_lock(m)#1");
        assert!(e.message.contains("expected `#N`"), "{e}");
        assert_eq!(
            e.to_string(),
            "1:16: expected `#N` (the occurrence, 1-based) after the object"
        );
    }

    #[test]
    fn after_points() {
        let s = Schedule::parse(
            "1:mutex_unlock(m)#1 -> 2:mutex_lock(m)#1\n\
             2:mutex_unlock(m)#1 -> 1:after(mutex_unlock(m)#1)\n\
             after(1:mutex_unlock(m)#1) -> 2:mutex_lock(m)#2\n",
        )
        .unwrap();
        let held = &s.orderings[1].after;
        assert!(held.after && held.kind == Kind::MutexUnlock && held.occurrence == 1);
        assert_eq!(held.to_string(), "1:after(mutex_unlock(m)#1)");
        // The other spelling names the same point.
        assert_eq!(&s.orderings[2].before[0], held);
        assert_eq!(
            s.orderings[2].to_string(),
            "1:after(mutex_unlock(m)#1) -> 2:mutex_lock(m)#2"
        );
        // An event and the point after it are different events.
        assert_ne!(s.orderings[0].before[0], *held);
        assert_eq!(s.orderings[0].before[0].after_point(), *held);
        assert_eq!(s.events().len(), 5);
        let spaced = Schedule::parse("1:after( mutex_unlock(m)#1 ) -> 2:mutex_lock(m)#2").unwrap();
        assert_eq!(&spaced.orderings[0].before[0], held);
        let e = err("1:after(write(x)#1) -> 2:mutex_lock(m)#1");
        assert!(e.message.contains("no point after a `write`"), "{e}");
        let e = err("1:after(mutex_unlock(m)#1 -> 2:mutex_lock(m)#1");
        assert!(e.message.contains("closing `after(`"), "{e}");
        let e = err("1:mutex_lock(m)#1 -> *:after(mutex_lock(m)#1)");
        assert!(e.message.contains("not `*`"), "{e}");
    }

    #[test]
    fn event_from_str() {
        let e: EventRef = "2:sem_post(@3)#4".parse().unwrap();
        assert_eq!(e.to_string(), "2:sem_post(@3)#4");
        assert!("2:sem_post(@3)#4 x".parse::<EventRef>().is_err());
    }

    #[test]
    fn empty_and_comment_only() {
        assert!(Schedule::parse("").unwrap().is_empty());
        assert!(Schedule::parse("  # nothing\n\n   \n").unwrap().is_empty());
    }
}

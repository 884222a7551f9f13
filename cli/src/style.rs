//! Colour for people, never for pipes: ANSI colour only when the stream is a terminal, `TERM`
//! is not `dumb`, and `NO_COLOR` is unset or empty (no-color.org).

/// Standard output.
pub const STDOUT: i32 = 1;

/// Whether text written to `fd` may be coloured.
pub fn enabled(fd: i32) -> bool {
    decide(
        std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
        std::env::var("TERM").ok().as_deref(),
        // SAFETY: isatty on a descriptor number.
        unsafe { libc::isatty(fd) } == 1,
    )
}

fn decide(no_color: bool, term: Option<&str>, tty: bool) -> bool {
    !no_color && tty && term.is_some_and(|t| t != "dumb")
}

#[derive(Clone, Copy)]
pub enum Colour {
    Green,
    Grey,
    Red,
    Bold,
}

/// `text` in `colour` when `on`.
pub fn paint(text: &str, colour: Colour, on: bool) -> String {
    if !on {
        return text.to_string();
    }
    let code = match colour {
        Colour::Green => "32",
        Colour::Grey => "90",
        Colour::Red => "31",
        Colour::Bold => "1",
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_terminals_and_never_with_no_color() {
        assert!(decide(false, Some("xterm"), true));
        assert!(!decide(true, Some("xterm"), true), "NO_COLOR");
        assert!(!decide(false, Some("xterm"), false), "a pipe");
        assert!(!decide(false, Some("dumb"), true));
        assert!(!decide(false, None, true));
        assert_eq!(paint("x", Colour::Red, false), "x");
        assert_eq!(paint("x", Colour::Red, true), "\x1b[31mx\x1b[0m");
    }
}

//! What a command prints as its result goes through [`emit`], so a reader that stops
//! early (`halflife info --json | head`) ends the command quietly instead of a panic.

use std::io::Write;

/// Writes `text` to stdout. A closed pipe (the reader has what it wanted) exits at once
/// with status 0, as Unix tools do; any other write error exits 1 with the error.
pub fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: writing the output: {e}");
        std::process::exit(1);
    }
}

/// [`emit`] with a line end.
pub fn emit_line(text: &str) {
    emit(&format!("{text}\n"));
}

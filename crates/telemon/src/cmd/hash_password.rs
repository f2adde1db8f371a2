//! `telemon hash-password`: the bcrypt hash of a password, for `basic_auth_users` of the web config
//! file, with nothing but telemon installed (as `caddy hash-password` does; `htpasswd` is rarely there).
//!
//! The password is typed at a prompt without echo (twice) when stdin is a terminal, and read from
//! the first line of stdin otherwise (`printf '%s\n' "$PASSWORD" | telemon hash-password`). The hash
//! goes to stdout alone, `$2y$` as `htpasswd -B` writes it, at cost 10 by default: the cost of
//! exporter-toolkit's own example (`htpasswd -nBC 10`), about 70 ms per check on a current core,
//! paid once per user and password (telemon and the toolkit cache a verified password).

use std::io::{BufRead, IsTerminal};

use crate::output::{CliError, CliResult};

/// exporter-toolkit's recommended bcrypt cost (its `docs/web-configuration.md`).
pub const DEFAULT_COST: u32 = 10;
/// The most bytes bcrypt uses of a password: a longer one is refused rather than silently cut
/// (Go's `bcrypt.GenerateFromPassword` refuses it too).
pub const MAX_PASSWORD_BYTES: usize = 72;

/// Print the bcrypt hash of a password for `basic_auth_users` (prompted without echo, or stdin's first line).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The bcrypt cost (4 to 31): each step doubles the time a check takes.
    #[arg(long, default_value_t = DEFAULT_COST, value_parser = clap::value_parser!(u32).range(4..=31))]
    cost: u32,
}

/// Runs the subcommand.
pub async fn run(args: Args) -> CliResult {
    let password =
        if std::io::stdin().is_terminal() { prompted()? } else { first_line(std::io::stdin().lock())? };
    check(&password)?;
    let cost = args.cost;
    let hashed = tokio::task::spawn_blocking(move || bcrypt::hash_with_result(password.as_bytes(), cost))
        .await
        .map_err(CliError::peer)?
        .map_err(CliError::peer)?;
    println!("{}", hashed.format_for_version(bcrypt::Version::TwoY));
    Ok(())
}

/// The password typed twice at a prompt on the terminal, without echo.
fn prompted() -> Result<String, CliError> {
    let read = |prompt: &str| rpassword::prompt_password(prompt).map_err(CliError::peer);
    let password = read("Password: ")?;
    if read("Again: ")? != password {
        return Err(CliError::Usage("the two passwords differ: nothing was hashed".into()));
    }
    Ok(password)
}

/// The first line of `input`, without its line ending (`\n` or `\r\n`); read up to a few times
/// [`MAX_PASSWORD_BYTES`], so that a stream without a newline cannot take all memory.
fn first_line(input: impl BufRead) -> Result<String, CliError> {
    let mut line = Vec::new();
    input.take(4 * MAX_PASSWORD_BYTES as u64).read_until(b'\n', &mut line).map_err(CliError::peer)?;
    if line.ends_with(b"\n") {
        line.pop();
        if line.ends_with(b"\r") {
            line.pop();
        }
    }
    String::from_utf8(line).map_err(|_| CliError::Usage("the password on stdin is not UTF-8 text".into()))
}

/// Refuses what bcrypt cannot hash faithfully: nothing, or more than [`MAX_PASSWORD_BYTES`].
fn check(password: &str) -> CliResult {
    if password.is_empty() {
        return Err(CliError::Usage("the password is empty: nothing was hashed".into()));
    }
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(CliError::Usage(format!(
            "the password is {} bytes long: bcrypt uses only the first {MAX_PASSWORD_BYTES}, so it is refused",
            password.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_is_the_password() {
        assert_eq!(first_line(&b"s3cret\n"[..]).unwrap(), "s3cret");
        assert_eq!(first_line(&b"s3cret\r\nignored\n"[..]).unwrap(), "s3cret");
        assert_eq!(first_line(&b"no newline"[..]).unwrap(), "no newline");
        assert_eq!(first_line(&b" spaces kept \n"[..]).unwrap(), " spaces kept ");
        assert!(first_line(&b"\xff\xfe\n"[..]).is_err());
        // A stream with no newline is read up to a bound, then refused as too long.
        let endless = std::io::repeat(b'a');
        let line = first_line(std::io::BufReader::new(endless)).unwrap();
        assert_eq!(line.len(), 4 * MAX_PASSWORD_BYTES);
        assert!(check(&line).is_err());
    }

    #[test]
    fn empty_and_overlong_passwords_are_refused() {
        assert!(check("").is_err());
        assert!(check(&"x".repeat(MAX_PASSWORD_BYTES)).is_ok());
        assert!(check(&"x".repeat(MAX_PASSWORD_BYTES + 1)).is_err());
    }
}

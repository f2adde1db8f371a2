//! `telemon hash-password`: the hash it prints is one that `basic_auth_users` takes and that the
//! server's own basic auth accepts for that password (and only that one); from stdin, or typed twice
//! at a prompt without echo (in a pseudo-terminal); bad input exits 2.

use std::path::Path;
use std::time::Duration;

use telemon::config::Config;

mod support;

const PASSWORD: &str = "correct horse battery staple";

/// `telemon hash-password ARGS` with `stdin`: (exit code, stdout, stderr).
async fn hash_password(args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let mut all = vec!["hash-password"];
    all.extend_from_slice(args);
    let out = support::run(&all, Some(stdin)).await;
    (support::code(&out), support::stdout(&out), support::stderr(&out))
}

/// A server whose web config has the user `prometheus` with `hash`, over plain HTTP.
async fn serve_with(dir: &Path, hash: &str) -> telemon::http::Server {
    let web = dir.join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prometheus: {hash}\n")).unwrap();
    let mut config = Config::parse("hash.toml", "[[smon]]\nname = \"x\"\nconnect = \"127.0.0.1:1\"\n")
        .unwrap_or_else(|e| panic!("{e}"));
    config.serve.web_config = Some(web);
    telemon::http::start(&config, Some("127.0.0.1:0")).await.expect("serve starts")
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_hash_opens_basic_auth_for_that_password_only() {
    let (code, out, err) = hash_password(&[], format!("{PASSWORD}\n").as_bytes()).await;
    assert_eq!(code, 0, "{err}");
    let hash = out.trim_end_matches('\n');
    assert_eq!(out.lines().count(), 1, "the hash alone on stdout: {out:?}");
    // htpasswd's format, at the toolkit's recommended cost.
    assert!(hash.starts_with("$2y$10$") && hash.len() == 60, "{hash}");

    let dir = tempfile::tempdir().unwrap();
    let server = serve_with(dir.path(), hash).await;
    let addr = server.local_addr();
    let right = basic("prometheus", PASSWORD);
    let (status, _) = support::http_get(addr, "/metrics", &[("Authorization", &right)]).await.unwrap();
    assert_eq!(status, 200);
    for wrong in [basic("prometheus", "correct horse battery"), basic("prometheus", &format!("{PASSWORD}\n"))]
    {
        let (status, _) = support::http_get(addr, "/metrics", &[("Authorization", &wrong)]).await.unwrap();
        assert_eq!(status, 401, "{wrong}");
    }
    server.shutdown().await;

    // --cost, and a CRLF line ending is not part of the password.
    let (code, out, err) = hash_password(&["--cost", "4"], format!("{PASSWORD}\r\nmore\n").as_bytes()).await;
    assert_eq!(code, 0, "{err}");
    let hash = out.trim_end();
    assert!(hash.starts_with("$2y$04$"), "{hash}");
    assert!(bcrypt::verify(PASSWORD, hash).unwrap());
}

#[tokio::test]
async fn bad_input_exits_2_and_prints_no_hash() {
    let long = "x".repeat(73);
    for (args, stdin, why) in [
        (&[][..], &b""[..], "empty"),
        (&[], b"\n", "empty"),
        (&[], long.as_bytes(), "only the first 72"),
        (&[], b"\xff\xfe\n", "not UTF-8"),
        (&["--cost", "3"], b"pw\n", "--cost"),
        (&["--cost", "32"], b"pw\n", "--cost"),
    ] {
        let (code, out, err) = hash_password(args, stdin).await;
        assert_eq!(code, 2, "{args:?} {stdin:?}: {err}");
        assert!(out.is_empty(), "{out}");
        assert!(err.contains(why), "{why:?} in {err}");
    }
}

/// `telemon hash-password --cost 4` in a pseudo-terminal, typing each of `lines` once its prompt is on
/// the screen and the terminal's echo is off (typed earlier, the terminal itself would echo it, as
/// for a person typing ahead of the prompt): (exit code, everything the terminal showed). `None`
/// when no pseudo-terminal can be opened outside CI.
async fn at_a_terminal(lines: [&str; 2]) -> Option<(u32, String)> {
    use portable_pty::{native_pty_system, CommandBuilder, PtySize};
    use std::io::{Read, Write};
    let size = PtySize { rows: 24, cols: 80, pixel_width: 0, pixel_height: 0 };
    let pty = match native_pty_system().openpty(size) {
        Ok(pty) => pty,
        Err(e) => {
            assert!(!support::in_ci(), "no pseudo-terminal under CI=true: {e}");
            eprintln!(
                "SKIPPED: cannot open a pseudo-terminal ({e}); not testing hash-password at a terminal"
            );
            return None;
        }
    };
    let mut cmd = CommandBuilder::new(support::TELEMON);
    cmd.args(["hash-password", "--cost", "4"]);
    let mut child = pty.slave.spawn_command(cmd).expect("telemon starts in the pty");
    drop(pty.slave);
    let mut reader = pty.master.try_clone_reader().unwrap();
    let mut writer = pty.master.take_writer().unwrap();
    let screen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let shown = screen.clone();
    let reading = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            shown.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    let text =
        |screen: &std::sync::Mutex<Vec<u8>>| String::from_utf8_lossy(&screen.lock().unwrap()).into_owned();
    // ECHO of termios's c_lflag (0o10 on Linux); the master reads the terminal's settings.
    const ECHO: u32 = 0o10;
    let echo_off = || pty.master.get_termios().is_some_and(|t| t.local_flags.bits() & ECHO == 0);
    for (prompt, line) in ["Password: ", "Again: "].into_iter().zip(lines) {
        support::until(&format!("{prompt:?} with echo off"), Duration::from_millis(10), async || {
            (text(&screen).contains(prompt) && echo_off()).then_some(())
        })
        .await;
        writer.write_all(format!("{line}\n").as_bytes()).unwrap();
        writer.flush().unwrap();
    }
    let status =
        support::until("telemon to exit", Duration::from_millis(20), async || child.try_wait().unwrap())
            .await;
    drop(pty.master);
    drop(writer);
    reading.join().unwrap();
    Some((status.exit_code(), text(&screen)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_a_terminal_the_password_is_typed_twice_without_echo() {
    let Some((code, screen)) = at_a_terminal([PASSWORD, PASSWORD]).await else { return };
    assert_eq!(code, 0, "{screen}");
    assert!(!screen.contains(PASSWORD), "the password is never echoed: {screen:?}");
    let hash = screen.lines().map(str::trim).find(|l| l.starts_with("$2y$04$")).expect("a hash");
    assert!(bcrypt::verify(PASSWORD, hash).unwrap());

    let Some((code, screen)) = at_a_terminal([PASSWORD, "something else"]).await else { return };
    assert_eq!(code, 2, "{screen}");
    assert!(screen.contains("the two passwords differ") && !screen.contains("$2y$"), "{screen:?}");
}

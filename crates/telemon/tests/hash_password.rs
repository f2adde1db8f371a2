//! `telemon hash-password`: the hash it prints is one that `basic_auth_users` takes and that the
//! server's own basic auth accepts for that password (and only that one); from stdin, or typed twice
//! at a prompt without echo (on a pseudo-terminal made by `script`); bad input exits 2.

use std::path::Path;

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

#[tokio::test]
async fn at_a_terminal_the_password_is_typed_twice_without_echo() {
    let test = "at_a_terminal_the_password_is_typed_twice_without_echo";
    let Some(script) = support::need_on_path(test, "script", "apt-get install bsdutils") else { return };
    // script(1) runs telemon on a pseudo-terminal and types what it reads on its stdin; each line is
    // typed once its prompt is on the screen (typed earlier, the terminal would echo it before
    // telemon turns echo off, as it would for a person typing ahead).
    let command = format!("{} hash-password --cost 4", support::TELEMON);
    let run = |lines: [String; 2]| {
        let (script, command) = (script.clone(), command.clone());
        async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut child = tokio::process::Command::new(script)
                .args(["-qec", &command, "/dev/null"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .expect("script starts");
            let mut stdin = child.stdin.take().unwrap();
            let mut stdout = child.stdout.take().unwrap();
            let mut screen = Vec::new();
            for (prompt, line) in ["Password: ", "Again: "].into_iter().zip(lines) {
                support::within(prompt, async {
                    let mut buf = [0u8; 256];
                    while !String::from_utf8_lossy(&screen).contains(prompt) {
                        let n = stdout.read(&mut buf).await.unwrap();
                        assert!(n > 0, "no {prompt:?} on {:?}", String::from_utf8_lossy(&screen));
                        screen.extend_from_slice(&buf[..n]);
                    }
                })
                .await;
                stdin.write_all(format!("{line}\n").as_bytes()).await.unwrap();
            }
            support::within("telemon to finish", stdout.read_to_end(&mut screen)).await.unwrap();
            let status = support::within("telemon to exit", child.wait()).await.unwrap();
            (status.code().unwrap_or(-1), String::from_utf8_lossy(&screen).into_owned())
        }
    };
    let (code, screen) = run([PASSWORD.into(), PASSWORD.into()]).await;
    assert_eq!(code, 0, "{screen}");
    assert!(!screen.contains(PASSWORD), "the password is never echoed: {screen:?}");
    let hash = screen.lines().map(str::trim).find(|l| l.starts_with("$2y$04$")).expect("a hash");
    assert!(bcrypt::verify(PASSWORD, hash).unwrap());

    let (code, screen) = run([PASSWORD.into(), "something else".into()]).await;
    assert_eq!(code, 2, "{screen}");
    assert!(screen.contains("the two passwords differ") && !screen.contains("$2y$"), "{screen:?}");
}

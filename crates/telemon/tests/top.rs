//! `telemon top` as a person sees it: frames rendered with ratatui's `TestBackend` over the five
//! sims in-process (every target listed with its status, values that move, a stopped sim down and
//! back up, zoom, 80×24 without cut-off help), and the real binary in a pseudo-terminal.

use std::io::{Read, Write};
use std::time::Duration;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use sim_common::Shutdown;
use smon_codec::Sample;
use smon_sim::{Config as SmonConfig, Source, MIN_INTERVAL};
use telemon::config::Config;
use telemon::top::{render_text, App};
use telemon_fleet::Fleet;
use tokio::net::TcpListener;

mod support;
use support::within;

struct Cpus(u64);

impl Source for Cpus {
    fn sample(&mut self) -> Vec<Sample> {
        self.0 += 1;
        vec![
            Sample::new("linux.cpu.idle", [0], 1000 + 3 * self.0),
            Sample::new("linux.cpu.idle", [1], 2000 + 7 * self.0),
            Sample::new("linux.mem.free", [], 5000),
        ]
    }
}

struct Sims {
    shutdown: Shutdown,
    dir: tempfile::TempDir,
    sys161: Option<sys161_sim::Running>,
    toml: String,
}

async fn sims() -> Sims {
    let shutdown = Shutdown::new();
    let dir = tempfile::tempdir().unwrap();
    let sys161 = sys161_sim::Running::spawn(dir.path(), sys161_sim::Config::default()).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hmon = l.local_addr().unwrap();
    tokio::spawn(dyalog_sim::Sim::new(dyalog_sim::Config::default()).serve(l, shutdown.clone()));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let smon = l.local_addr().unwrap();
    tokio::spawn(smon_sim::serve(
        l,
        Cpus(0),
        SmonConfig { interval: MIN_INTERVAL, ..SmonConfig::default() },
        shutdown.clone(),
    ));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let rvos = l.local_addr().unwrap();
    tokio::spawn(rvos_sim::run(l, rvos_sim::Config::default(), shutdown.clone()));
    let mono = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut agent = mono_agent_sim::AgentConfig::from_options(&format!(
        "address={mono},counters=Mono JIT/Compiled methods;Mono System/Working Set,interval=200"
    ))
    .unwrap();
    agent.backoff =
        mono_agent_sim::Backoff { initial: Duration::from_millis(10), max: Duration::from_millis(100) };
    tokio::spawn(mono_agent_sim::run(agent, shutdown.clone()));
    let toml = format!(
        "[[meter161]]\nname = \"a-os161\"\ndir = \"{}\"\ninterval = \"100ms\"\n\
         [[hmon]]\nname = \"b-dyalog\"\nconnect = \"{hmon}\"\npoll = \"200ms\"\n\
         [[mono_listen]]\nname = \"c-mono\"\nlisten = \"{mono}\"\n\
         [[smon]]\nname = \"d-smon\"\nconnect = \"{smon}\"\n\
         [[sysinfo]]\nname = \"e-rvos\"\nconnect = \"{rvos}\"\nevery = \"300ms\"\n",
        dir.path().display()
    );
    Sims { shutdown, dir, sys161: Some(sys161), toml }
}

fn press(app: &mut App, code: KeyCode) {
    app.key(KeyEvent::new(code, KeyModifiers::NONE));
}

/// Updates and samples (one fake second per call) until `ok(frame)` holds; returns the frame.
async fn frame_until(
    app: &mut App,
    fleet: &Fleet,
    second: &mut u32,
    w: u16,
    h: u16,
    what: &str,
    ok: impl Fn(&str) -> bool,
) -> String {
    within(what, async {
        loop {
            app.update(fleet.snapshot());
            app.sample_at(*second);
            *second += 1;
            let frame = render_text(app, w, h);
            if ok(&frame) {
                return frame;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
}

fn row<'a>(frame: &'a str, target: &str) -> &'a str {
    frame.lines().find(|l| l.contains(target)).unwrap_or_else(|| panic!("{target} not listed:\n{frame}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_every_target_and_follows_them() {
    let mut sims = sims().await;
    let config = Config::parse("t.toml", &sims.toml).unwrap();
    let fleet = Fleet::start(&config.fleet).await.unwrap();
    let mut app = App::new();
    let mut s = 0;

    // Every target listed, up (the symbol reads without colour).
    let frame = frame_until(&mut app, &fleet, &mut s, 100, 30, "five targets up", |f| {
        ["a-os161", "b-dyalog", "c-mono/", "d-smon", "e-rvos"]
            .iter()
            .all(|t| f.lines().any(|l| l.contains(t) && l.contains('▲')))
    })
    .await;
    assert!(frame.contains("targets 5/5 up"), "{frame}");
    assert!(row(&frame, "b-dyalog").contains("hmon"));

    // The selected target (the first) shows its values, and they change between frames.
    let first = frame_until(&mut app, &fleet, &mut s, 100, 30, "meter161 rates", |f| {
        f.contains("kernel insns/s") && f.contains("sim s / wall s")
    })
    .await;
    let value = |f: &str| {
        let l = row(f, "kernel insns/s");
        l[l.find("kernel insns/s").unwrap() + 14..].split_whitespace().next().unwrap_or("").to_owned()
    };
    let v1 = value(&first);
    let second =
        frame_until(&mut app, &fleet, &mut s, 100, 30, "meter161 values to change", |f| value(f) != v1).await;
    assert!(second.contains("-60s") && second.contains("now"), "{second}");

    // Zoom changes the time axis labels.
    press(&mut app, KeyCode::Char('+'));
    let zoomed = render_text(&mut app, 100, 30);
    assert!(zoomed.contains("-2m") && zoomed.contains("-60s") && zoomed.contains("zoom 2m"), "{zoomed}");
    press(&mut app, KeyCode::Char('-'));
    press(&mut app, KeyCode::Char('-'));
    let zoomed = render_text(&mut app, 100, 30);
    assert!(zoomed.contains("-30s") && zoomed.contains("-15s") && zoomed.contains("zoom 30s"), "{zoomed}");

    // Each protocol's pane.
    press(&mut app, KeyCode::Down);
    let hmon = frame_until(&mut app, &fleet, &mut s, 100, 30, "the hmon pane", |f| {
        f.contains("compactions") && f.contains("threads")
    })
    .await;
    assert!(hmon.contains("workspace: used, available"), "{hmon}");
    assert!(hmon.contains("last events"), "{hmon}");
    press(&mut app, KeyCode::Char('j'));
    let mono = frame_until(&mut app, &fleet, &mut s, 100, 30, "the mono pane", |f| {
        f.contains("Mono System/Working Set")
    })
    .await;
    assert!(mono.contains("MiB") || mono.contains("KiB"), "working set humanised: {mono}");
    press(&mut app, KeyCode::Down);
    let smon = frame_until(&mut app, &fleet, &mut s, 100, 30, "the smon pane", |f| {
        f.contains("linux.cpu.idle[1]") && f.contains("per index")
    })
    .await;
    // The value that moves most comes first.
    let idle1 = smon.find("linux.cpu.idle[1]").unwrap();
    let free = smon.find("linux.mem.free").unwrap();
    assert!(idle1 < free, "{smon}");
    press(&mut app, KeyCode::Down);
    let rvos = frame_until(&mut app, &fleet, &mut s, 100, 30, "the rvos pane", |f| {
        f.contains("PID") && f.contains("sched latency") && f.contains("watchdog")
    })
    .await;
    assert!(rvos.contains("kstat"), "{rvos}");

    // A stopped sim shows as down, and comes back up when restarted.
    press(&mut app, KeyCode::Char('g'));
    sims.sys161.take().unwrap().stop().await.unwrap();
    let down =
        frame_until(&mut app, &fleet, &mut s, 100, 30, "meter161 down", |f| row(f, "a-os161").contains('▼'))
            .await;
    assert!(down.contains("targets 4/5 up"), "{down}");
    let restarted = sys161_sim::Running::spawn(sims.dir.path(), sys161_sim::Config::default()).unwrap();
    frame_until(&mut app, &fleet, &mut s, 100, 30, "meter161 up again", |f| row(f, "a-os161").contains('▲'))
        .await;

    // Pause freezes the view.
    press(&mut app, KeyCode::Char('p'));
    let paused = render_text(&mut app, 100, 30);
    assert!(paused.contains("PAUSED"), "{paused}");
    press(&mut app, KeyCode::Char('p'));

    // 80×24: the key help is whole.
    let small = render_text(&mut app, 80, 24);
    let help = small.lines().last().unwrap();
    for k in ["q quit", "select", "Tab", "pane", "zoom", "p pause"] {
        assert!(help.contains(k), "{help:?} lacks {k:?}\n{small}");
    }
    assert!(small.lines().all(|l| l.chars().count() <= 80));

    restarted.stop().await.unwrap();
    sims.shutdown.cancel();
    fleet.shutdown().await;
}

/// The real binary in a pseudo-terminal: it starts, shows the targets, quits on `q` with exit
/// code 0 and leaves the terminal as it found it (alternate screen left, cursor shown).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_runs_in_a_pseudo_terminal_and_quits_on_q() {
    use portable_pty::{native_pty_system, CommandBuilder, PtySize};
    let sims = sims().await;
    let cfg = sims.dir.path().join("telemon.toml");
    std::fs::write(&cfg, &sims.toml).unwrap();

    let pty = match native_pty_system().openpty(PtySize {
        rows: 24,
        cols: 80,
        pixel_width: 0,
        pixel_height: 0,
    }) {
        Ok(pty) => pty,
        Err(e) => {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "no pseudo-terminal under CI=true: {e}");
            eprintln!("SKIPPED: cannot open a pseudo-terminal ({e}); not testing telemon top in a terminal");
            return;
        }
    };
    let mut cmd = CommandBuilder::new(support::TELEMON);
    let web = support::free_addr().to_string();
    cmd.args(["top", "--config", cfg.to_str().unwrap(), "--web", &web]);
    cmd.env("TERM", "xterm-256color");
    let mut child = pty.slave.spawn_command(cmd).expect("telemon starts in the pty");
    drop(pty.slave);
    let mut reader = pty.master.try_clone_reader().unwrap();
    let mut writer = pty.master.take_writer().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                return;
            }
        }
    });
    // The bytes as a terminal would show them.
    let mut screen = Vec::new();
    let mut term = vt100::Parser::new(24, 80, 0);
    let shown = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let text = term.screen().contents();
            if text.contains("targets 5/5 up")
                && text.contains(&format!("http://{web}/"))
                && ["a-os161", "b-dyalog", "c-mono/", "d-smon", "e-rvos"].iter().all(|t| text.contains(t))
            {
                return;
            }
            match rx.recv().await {
                Some(chunk) => {
                    term.process(&chunk);
                    screen.extend(chunk);
                }
                None => return,
            }
        }
    })
    .await;
    assert!(shown.is_ok(), "the targets never showed; the screen:\n{}", term.screen().contents());
    let text = String::from_utf8_lossy(&screen).into_owned();
    assert!(text.contains("\x1b[?1049h"), "entered the alternate screen");
    writer.write_all(b"q").unwrap();
    writer.flush().unwrap();
    let status = within("telemon to exit", async {
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(status.success(), "exit status {status:?}");
    // Drain what it wrote on the way out: the terminal is as it was.
    tokio::time::sleep(Duration::from_millis(200)).await;
    while let Ok(chunk) = rx.try_recv() {
        term.process(&chunk);
        screen.extend(chunk);
    }
    let t = term.screen();
    assert!(!t.alternate_screen(), "left the alternate screen");
    assert!(!t.hide_cursor(), "cursor shown again");
    assert_eq!(t.mouse_protocol_mode(), vt100::MouseProtocolMode::None, "mouse capture off");
    sims.shutdown.cancel();
}

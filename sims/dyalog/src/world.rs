//! The simulated interpreter: a workspace that changes over time, threads that come and go, signals.
//!
//! The world advances one deterministic step per tick, so that every subscribable event really occurs
//! (and tests know which step causes which): used memory grows every step, a compaction happens every
//! 3rd step, the workspace is resized every 4th, a trapped signal every 5th (offset 2), an untrapped
//! one every 5th (offset 4, which suspends a thread until step 7 later), and a thread is started or
//! ended every 7th.

use std::sync::{Arc, Mutex, MutexGuard};

use hmon::{Dmx, EventKind, Exception, Timestamp};
use tokio::sync::broadcast;

/// One simulated APL thread.
#[derive(Debug, Clone, PartialEq)]
pub struct SimThread {
    /// The thread number (0 is the main thread).
    pub tid: i64,
    /// The SI stack, innermost first.
    pub stack: Vec<String>,
    /// Suspended after an untrapped signal.
    pub suspended: bool,
    /// Where it is.
    pub state: String,
    /// `Normal`, `Paused`, ...
    pub flags: String,
    /// `⎕DMX` while suspended.
    pub dmx: Option<Dmx>,
    /// `⎕EXCEPTION` while suspended (`None` is sent as `null`).
    pub exception: Option<Exception>,
}

/// Something the application did that monitors may hear about.
#[derive(Debug, Clone, PartialEq)]
pub enum WorldEvent {
    /// A subscribable event with its details.
    Event {
        /// Which.
        kind: EventKind,
        /// The thread (compaction and signals).
        tid: Option<i64>,
        /// Its stack (compaction and signals).
        stack: Option<Vec<String>>,
        /// `⎕DMX` (signals).
        dmx: Option<Box<Dmx>>,
        /// The new size (resize).
        size: Option<i64>,
    },
    /// `111⌶`: a message for every connected monitor.
    UserMessage {
        /// The optional UID.
        uid: Option<String>,
        /// The text.
        text: String,
    },
}

/// The workspace statistics (`2000⌶`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceStats {
    /// The workspace name.
    pub wsid: String,
    /// Bytes in use.
    pub used: i64,
    /// The committed size.
    pub size: i64,
    /// Compactions so far.
    pub compactions: i64,
    /// Garbage collections so far.
    pub garbage_collections: i64,
    /// High-water mark of the allocation.
    pub allocation_hwm: i64,
}

/// The interpreter's state.
#[derive(Debug)]
pub struct State {
    /// Steps taken.
    pub step: u64,
    /// The workspace.
    pub workspace: WorkspaceStats,
    /// The threads.
    pub threads: Vec<SimThread>,
    /// When the interpreter started.
    pub started: Timestamp,
    /// The current activity code and since when.
    pub activity: (i64, Timestamp),
    /// The line being run and since when.
    pub location: (String, i64, Timestamp),
    /// The last WS FULL.
    pub ws_full: Option<Timestamp>,
    /// Busy: only `GetLastKnownState` is answered.
    pub busy: bool,
    next_tid: i64,
}

/// The shared world, cheap to clone.
#[derive(Debug, Clone)]
pub struct World {
    state: Arc<Mutex<State>>,
    events: broadcast::Sender<WorldEvent>,
    busy: Arc<tokio::sync::watch::Sender<bool>>,
}

const STEP_GROWTH: i64 = 96 * 1024;
const INITIAL_SIZE: i64 = 64 * 1024 * 1024;

impl World {
    /// A fresh interpreter with a main thread and a worker.
    pub fn new(wsid: &str, busy: bool) -> World {
        let now = Timestamp::now();
        let state = State {
            step: 0,
            workspace: WorkspaceStats {
                wsid: wsid.to_owned(),
                used: 2 * 1024 * 1024,
                size: INITIAL_SIZE,
                compactions: 0,
                garbage_collections: 0,
                allocation_hwm: 2 * 1024 * 1024,
            },
            threads: vec![
                thread(0, &["#.Main[3]", "#.Run[12]"], "Session"),
                thread(1, &["#.Worker.Loop[7]", "#.Worker.Fetch[2]"], "Sleeping"),
            ],
            started: now,
            activity: (if busy { 222 } else { 1 }, now),
            location: ("#.Main".to_owned(), 3, now),
            ws_full: None,
            busy,
            next_tid: 2,
        };
        let (events, _) = broadcast::channel(256);
        let (busy_tx, _) = tokio::sync::watch::channel(busy);
        World { state: Arc::new(Mutex::new(state)), events, busy: Arc::new(busy_tx) }
    }

    /// Locks the state (never held across an await).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Hears about events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<WorldEvent> {
        self.events.subscribe()
    }

    /// Watches the busy flag.
    pub fn watch_busy(&self) -> tokio::sync::watch::Receiver<bool> {
        self.busy.subscribe()
    }

    /// Makes the interpreter busy (only `GetLastKnownState` is answered) or responsive again.
    pub fn set_busy(&self, busy: bool) {
        {
            let mut s = self.lock();
            s.busy = busy;
            s.activity = (if busy { 222 } else { 1 }, Timestamp::now());
        }
        self.busy.send_replace(busy);
    }

    /// `111⌶`: sends a `UserMessage` to every connected monitor.
    pub fn user_message(&self, uid: Option<String>, text: impl Into<String>) {
        let _ = self.events.send(WorldEvent::UserMessage { uid, text: text.into() });
    }

    /// Raises an event directly (for tests and demos).
    pub fn raise(&self, event: WorldEvent) {
        let _ = self.events.send(event);
    }

    /// Advances the world by one step and announces what happened.
    pub fn step(&self) {
        let mut out = Vec::new();
        {
            let mut s = self.lock();
            if s.busy {
                return;
            }
            s.step += 1;
            let n = s.step;
            let now = Timestamp::now();
            s.workspace.used += STEP_GROWTH;
            s.workspace.allocation_hwm = s.workspace.allocation_hwm.max(s.workspace.used);
            let line = (n % 9 + 1) as i64;
            s.location = ("#.Main".to_owned(), line, now);
            let main_stack = vec![format!("#.Main[{line}]"), "#.Run[12]".to_owned()];
            if n % 3 == 0 {
                s.workspace.compactions += 1;
                s.workspace.garbage_collections += 1;
                s.workspace.used -= STEP_GROWTH * 2;
                s.workspace.used = s.workspace.used.max(1024 * 1024);
                s.activity = (3, now);
                out.push(WorldEvent::Event {
                    kind: EventKind::WorkspaceCompaction,
                    tid: Some(0),
                    stack: Some(main_stack.clone()),
                    dmx: None,
                    size: None,
                });
            } else {
                s.activity = (1, now);
            }
            if n % 4 == 0 {
                // Grow in even steps, shrink back every fourth resize.
                s.workspace.size =
                    if n % 16 == 0 { INITIAL_SIZE } else { s.workspace.size + 8 * 1024 * 1024 };
                out.push(WorldEvent::Event {
                    kind: EventKind::WorkspaceResize,
                    tid: None,
                    stack: None,
                    dmx: None,
                    size: Some(s.workspace.size),
                });
            }
            if n % 5 == 2 {
                out.push(WorldEvent::Event {
                    kind: EventKind::TrappedSignal,
                    tid: Some(0),
                    stack: Some(main_stack.clone()),
                    dmx: Some(Box::new(dmx(11, "DOMAIN ERROR", &main_stack[0]))),
                    size: None,
                });
            }
            if n % 5 == 4 {
                let worker = s.threads.iter().position(|t| t.tid != 0 && !t.suspended);
                if let Some(i) = worker {
                    let t = &mut s.threads[i];
                    let d = dmx(3, "INDEX ERROR", &t.stack[0]);
                    t.suspended = true;
                    t.flags = "Normal".to_owned();
                    t.state = "Suspended".to_owned();
                    t.dmx = Some(d.clone());
                    t.exception = None;
                    out.push(WorldEvent::Event {
                        kind: EventKind::UntrappedSignal,
                        tid: Some(t.tid),
                        stack: Some(t.stack.clone()),
                        dmx: Some(Box::new(d)),
                        size: None,
                    });
                }
            }
            if n % 7 == 3 {
                let tid = s.next_tid;
                s.next_tid += 1;
                s.threads.push(thread(tid, &["#.Worker.Loop[7]", "#.Worker.Fetch[2]"], "Running"));
            }
            if n % 7 == 6 {
                // The oldest worker ends (a suspended one is cleared with it).
                if let Some(i) = s.threads.iter().position(|t| t.tid != 0) {
                    s.threads.remove(i);
                }
            }
        }
        for event in out {
            let _ = self.events.send(event);
        }
    }
}

fn thread(tid: i64, stack: &[&str], state: &str) -> SimThread {
    SimThread {
        tid,
        stack: stack.iter().map(|s| (*s).to_owned()).collect(),
        suspended: false,
        state: state.to_owned(),
        flags: "Normal".to_owned(),
        dmx: None,
        exception: None,
    }
}

fn dmx(en: i64, em: &str, line: &str) -> Dmx {
    Dmx {
        restricted: Some(false),
        category: Some(if en == 11 { "Domain" } else { "Index" }.to_owned()),
        dm: Some(vec![em.to_owned(), format!("{line} x←1÷0"), "         ∧".to_owned()]),
        em: Some(em.to_owned()),
        en: Some(en),
        enx: Some(0),
        internal_location: Some(serde_json::json!(["arith.c", 1234])),
        vendor: Some("Dyalog".to_owned()),
        message: Some(String::new()),
        os_error: Some(serde_json::json!([0, 0, ""])),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_kind_happens_within_a_few_steps() {
        let world = World::new("CLEAR WS", false);
        let mut rx = world.subscribe();
        for _ in 0..10 {
            world.step();
        }
        let mut seen = std::collections::BTreeSet::new();
        while let Ok(WorldEvent::Event { kind, .. }) = rx.try_recv() {
            seen.insert(kind);
        }
        assert_eq!(seen.len(), 4, "{seen:?}");
        assert!(world.lock().workspace.compactions >= 3);
    }

    #[test]
    fn a_busy_world_stands_still() {
        let world = World::new("W", true);
        world.step();
        assert_eq!(world.lock().step, 0);
        world.set_busy(false);
        world.step();
        assert_eq!(world.lock().step, 1);
    }
}

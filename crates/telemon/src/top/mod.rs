//! `telemon top`: a live terminal dashboard over the fleet (ratatui on crossterm).
//!
//! ```text
//! ┌targets──────────────────────┐┌os161 · meter161 · up──────────────────────────┐
//! │  TARGET      PROTOCOL AGE ER││ instructions/s (kernel, user)                 │
//! │▲ os161       meter161  0s  0││ ⣀⡠⠤⠒⠉ ...                                        │
//! │▼ vm1         sysinfo   -   3││ -60s               -30s                   now │
//! └─────────────────────────────┘└───────────────────────────────────────────────┘
//!  q quit · ↑↓ jk select · Tab ←→ pane · +- zoom 60s · p pause
//! ```
//!
//! [`App`] holds the state and draws a frame; [`run`] drives it in a real terminal and
//! [`render_text`] renders one frame as plain text (`telemon top --once`, tests).

pub use crate::history;
mod views;

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crossterm::event::{
    Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseButton, MouseEvent, MouseEventKind,
};
use futures::StreamExt;
use ratatui::backend::{Backend, TestBackend};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table, TableState};
use ratatui::{Frame, Terminal};

pub use history::History;
use telemon_fleet::{Fleet, FleetSnapshot, TargetSnapshot, TargetState};

/// The time windows `+`/`-` step through, in seconds.
pub const WINDOWS: [u32; 8] = [10, 30, 60, 120, 300, 600, 1800, 3600];
/// The window at start: 60 s.
pub const DEFAULT_WINDOW: usize = 2;
/// The shortest pause between two redraws.
pub const MIN_REDRAW: Duration = Duration::from_millis(250);

/// Which pane the arrow keys move in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Focus {
    /// The target list: ↑/↓ select a target.
    List,
    /// The selected target's pane: ↑/↓ scroll its tables.
    Detail,
}

/// What a key asks of the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing visible changed.
    None,
    /// Draw again.
    Redraw,
    /// Leave the dashboard.
    Quit,
}

/// The dashboard's state.
#[derive(Debug)]
pub struct App {
    snapshot: FleetSnapshot,
    history: History,
    selected: Option<Arc<str>>,
    focus: Focus,
    window: usize,
    paused: bool,
    scroll: usize,
    started: Instant,
    list_area: Rect,
    /// The web view's address (`telemon top --web`), shown on the help line.
    web: Option<String>,
}

impl Default for App {
    fn default() -> Self {
        App::new()
    }
}

impl App {
    /// A dashboard with no targets yet, at the default window.
    pub fn new() -> Self {
        App {
            snapshot: FleetSnapshot::default(),
            history: History::new(),
            selected: None,
            focus: Focus::List,
            window: DEFAULT_WINDOW,
            paused: false,
            scroll: 0,
            started: Instant::now(),
            list_area: Rect::default(),
            web: None,
        }
    }

    /// Shows the web view's address (`http://ADDR/`) on the help line.
    pub fn show_web(&mut self, addr: &str) {
        self.web = Some(format!("http://{addr}/"));
    }

    /// The current time window in seconds.
    pub fn window_secs(&self) -> u32 {
        WINDOWS[self.window]
    }

    /// Whether the view is frozen.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// The selected target's name.
    pub fn selected(&self) -> Option<&str> {
        self.selected.as_deref()
    }

    /// Takes the fleet's latest state (ignored while paused); the selection follows its target.
    pub fn update(&mut self, snapshot: FleetSnapshot) {
        if self.paused {
            return;
        }
        self.snapshot = snapshot;
        let still_there = self.selected.as_deref().is_some_and(|s| self.snapshot.get(s).is_some());
        if !still_there {
            self.selected = self.snapshot.targets.first().map(|t| t.name.clone());
            self.scroll = 0;
        }
    }

    /// Records the current values into the history (once a second; not while paused).
    pub fn sample(&mut self) {
        if !self.paused {
            let at = self.started.elapsed().as_secs() as u32;
            self.history.record(&self.snapshot, at);
        }
    }

    /// Records the current values as of second `at` (for tests with a fake clock).
    pub fn sample_at(&mut self, at: u32) {
        if !self.paused {
            self.history.record(&self.snapshot, at);
        }
    }

    /// Selects the target named `name` (or the first whose name starts with it), if listed.
    pub fn select_name(&mut self, name: &str) -> bool {
        let found = self
            .snapshot
            .targets
            .iter()
            .position(|t| &*t.name == name)
            .or_else(|| self.snapshot.targets.iter().position(|t| t.name.starts_with(name)));
        if let Some(i) = found {
            self.select(i);
        }
        found.is_some()
    }

    fn selected_index(&self) -> Option<usize> {
        let name = self.selected.as_deref()?;
        self.snapshot.targets.iter().position(|t| &*t.name == name)
    }

    fn select(&mut self, index: usize) {
        if let Some(t) = self.snapshot.targets.get(index) {
            if self.selected.as_deref() != Some(&*t.name) {
                self.selected = Some(t.name.clone());
                self.scroll = 0;
            }
        }
    }

    fn move_selection(&mut self, down: bool) {
        let n = self.snapshot.targets.len();
        if n == 0 {
            return;
        }
        let i = self.selected_index().unwrap_or(0);
        self.select(if down { (i + 1).min(n - 1) } else { i.saturating_sub(1) });
    }

    /// Handles a key press.
    pub fn key(&mut self, key: KeyEvent) -> Action {
        if key.kind == KeyEventKind::Release {
            return Action::None;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => Action::Quit,
            KeyCode::Char('c') if ctrl => Action::Quit,
            KeyCode::Up | KeyCode::Char('k') => {
                match self.focus {
                    Focus::List => self.move_selection(false),
                    Focus::Detail => self.scroll = self.scroll.saturating_sub(1),
                }
                Action::Redraw
            }
            KeyCode::Down | KeyCode::Char('j') => {
                match self.focus {
                    Focus::List => self.move_selection(true),
                    Focus::Detail => self.scroll = self.scroll.saturating_add(1).min(10_000),
                }
                Action::Redraw
            }
            KeyCode::Tab | KeyCode::BackTab | KeyCode::Left | KeyCode::Right | KeyCode::Char('h' | 'l') => {
                self.focus = match (key.code, self.focus) {
                    (KeyCode::Left | KeyCode::Char('h'), _) => Focus::List,
                    (KeyCode::Right | KeyCode::Char('l'), _) => Focus::Detail,
                    (_, Focus::List) => Focus::Detail,
                    (_, Focus::Detail) => Focus::List,
                };
                Action::Redraw
            }
            KeyCode::Char('+' | '=') => {
                self.window = (self.window + 1).min(WINDOWS.len() - 1);
                Action::Redraw
            }
            KeyCode::Char('-' | '_') => {
                self.window = self.window.saturating_sub(1);
                Action::Redraw
            }
            KeyCode::Char('p' | ' ') => {
                self.paused = !self.paused;
                Action::Redraw
            }
            KeyCode::Home | KeyCode::Char('g') => {
                self.select(0);
                Action::Redraw
            }
            KeyCode::End | KeyCode::Char('G') => {
                self.select(self.snapshot.targets.len().saturating_sub(1));
                Action::Redraw
            }
            _ => Action::None,
        }
    }

    /// Handles the mouse: a click in the list selects that target, the wheel scrolls.
    pub fn mouse(&mut self, m: MouseEvent) -> Action {
        let inside =
            |r: Rect| m.column >= r.x && m.column < r.x + r.width && m.row >= r.y && m.row < r.y + r.height;
        match m.kind {
            MouseEventKind::Down(MouseButton::Left) if inside(self.list_area) => {
                // The list has a border and a header row.
                let row = m.row.saturating_sub(self.list_area.y + 2) as usize;
                if m.row >= self.list_area.y + 2 {
                    self.select(row);
                }
                self.focus = Focus::List;
                Action::Redraw
            }
            MouseEventKind::ScrollDown => {
                self.move_selection(true);
                Action::Redraw
            }
            MouseEventKind::ScrollUp => {
                self.move_selection(false);
                Action::Redraw
            }
            _ => Action::None,
        }
    }

    /// Draws one frame.
    pub fn draw(&mut self, f: &mut Frame) {
        let [main, help] = Layout::vertical([Constraint::Min(3), Constraint::Length(1)]).areas(f.area());
        let list_width = (main.width * 2 / 5).clamp(24, 44).min(main.width);
        let [list, detail] =
            Layout::horizontal([Constraint::Length(list_width), Constraint::Min(0)]).areas(main);
        self.list_area = list;
        self.draw_list(f, list);
        self.draw_detail(f, detail);
        f.render_widget(Paragraph::new(self.help_line(help.width)), help);
    }

    fn help_line(&self, width: u16) -> Line<'static> {
        // The vi keys and arrows too when there is room; the short form fits in 80 columns.
        let wide = width >= 100;
        let zoom = format!("zoom {}", fmt_secs(self.window_secs()));
        let keys: [(&str, &str); 5] = [
            ("q", "quit"),
            (if wide { "↑↓ jk" } else { "↑↓" }, "select"),
            (if wide { "Tab ←→" } else { "Tab" }, "pane"),
            ("+-", &zoom),
            ("p", if self.paused { "resume" } else { "pause" }),
        ];
        let mut spans = Vec::new();
        for (k, what) in keys {
            spans.push(Span::styled(format!(" {k}"), Style::new().add_modifier(Modifier::BOLD)));
            spans.push(Span::raw(format!(" {what} ")));
        }
        if self.paused {
            spans.push(Span::styled(" PAUSED", Style::new().fg(Color::Yellow).add_modifier(Modifier::BOLD)));
        }
        if let Some(web) = &self.web {
            let label = if wide { "  web view: " } else { "  " };
            spans.push(Span::styled(format!("{label}{web}"), Style::new().fg(Color::Cyan)));
        }
        Line::from(spans)
    }

    fn draw_list(&self, f: &mut Frame, area: Rect) {
        let now = SystemTime::now();
        let rows: Vec<Row> = self
            .snapshot
            .targets
            .iter()
            .map(|t| {
                let (sym, color) = state_symbol(t.state);
                let errors = t.errors.total();
                let err_style = if errors > 0 { Style::new().fg(Color::Red) } else { Style::new() };
                Row::new(vec![
                    Cell::from(Span::styled(sym, Style::new().fg(color))),
                    Cell::from(t.name.to_string()),
                    Cell::from(t.protocol.as_str()),
                    Cell::from(age(t, now)),
                    Cell::from(Span::styled(fmt_count(errors), err_style)),
                ])
            })
            .collect();
        let header = Row::new(vec!["", "TARGET", "PROTOCOL", "AGE", "ERR"])
            .style(Style::new().add_modifier(Modifier::BOLD));
        let border = if self.focus == Focus::List { Color::Cyan } else { Color::DarkGray };
        let up = self.snapshot.targets.iter().filter(|t| t.is_up()).count();
        let title = format!(" targets {up}/{} up ", self.snapshot.targets.len());
        let table = Table::new(
            rows,
            [
                Constraint::Length(1),
                Constraint::Min(6),
                Constraint::Length(8),
                Constraint::Length(4),
                Constraint::Length(4),
            ],
        )
        .header(header)
        .block(Block::bordered().title(title).border_style(Style::new().fg(border)))
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
        let mut state = TableState::default().with_selected(self.selected_index());
        f.render_stateful_widget(table, area, &mut state);
    }

    fn draw_detail(&self, f: &mut Frame, area: Rect) {
        let border = if self.focus == Focus::Detail { Color::Cyan } else { Color::DarkGray };
        let Some(t) = self.selected_index().map(|i| &self.snapshot.targets[i]) else {
            let block = Block::bordered().title(" no targets ").border_style(Style::new().fg(border));
            f.render_widget(Paragraph::new("Waiting for targets...").block(block), area);
            return;
        };
        let (sym, color) = state_symbol(t.state);
        let title = Line::from(vec![
            Span::raw(format!(" {} · {} · ", t.name, t.protocol)),
            Span::styled(format!("{sym} {}", t.state.as_str()), Style::new().fg(color)),
            Span::raw(format!(" · {} connects ", t.connects)),
        ]);
        let block = Block::bordered().title(title).border_style(Style::new().fg(border));
        let inner = block.inner(area);
        f.render_widget(block, area);
        let mut body = inner;
        if let Some(e) = &t.last_error {
            let [err, rest] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(inner);
            let style = if t.is_up() { Style::new().fg(Color::Yellow) } else { Style::new().fg(Color::Red) };
            f.render_widget(Paragraph::new(Span::styled(format!("last error: {e}"), style)), err);
            body = rest;
        }
        if t.series.is_empty() {
            let msg = match t.state {
                TargetState::Up => "connected; waiting for the first values...",
                TargetState::Connecting => "connecting...",
                TargetState::Down => "down: no values (retrying with backoff)",
            };
            f.render_widget(Paragraph::new(msg), body);
            return;
        }
        let ctx = views::Ctx { t, history: &self.history, window: self.window_secs(), scroll: self.scroll };
        views::draw(f, body, &ctx);
    }
}

/// A target state's symbol and colour: the symbol reads without colour.
pub fn state_symbol(state: TargetState) -> (&'static str, Color) {
    match state {
        TargetState::Up => ("▲", Color::Green),
        TargetState::Connecting => ("…", Color::Yellow),
        TargetState::Down => ("▼", Color::Red),
    }
}

fn age(t: &TargetSnapshot, now: SystemTime) -> String {
    match t.last_update.and_then(|at| now.duration_since(at).ok()) {
        Some(d) => fmt_secs(d.as_secs() as u32),
        None => "-".into(),
    }
}

fn fmt_count(n: u64) -> String {
    if n < 1000 {
        n.to_string()
    } else {
        views::si(n as f64)
    }
}

/// `45s`, `2m`, `1h`: a duration as short as it goes.
pub fn fmt_secs(s: u32) -> String {
    if s < 120 {
        format!("{s}s")
    } else if s < 7200 {
        format!("{}m", s / 60)
    } else {
        format!("{}h", s / 3600)
    }
}

/// Renders one frame of `app` at `width`×`height` as plain text (trailing blanks trimmed).
pub fn render_text(app: &mut App, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("a test backend never fails");
    terminal.draw(|f| app.draw(f)).expect("a test backend never fails");
    buffer_text(terminal.backend().buffer())
}

/// The text of a rendered buffer, one line per row, trailing blanks trimmed.
pub fn buffer_text(buf: &ratatui::buffer::Buffer) -> String {
    let mut out = String::new();
    for y in 0..buf.area.height {
        let mut line = String::new();
        for x in 0..buf.area.width {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Runs the dashboard in the terminal until `q`, Esc or Ctrl-C, then restores the terminal (also
/// after a panic).
/// `select` names the target selected first; `web` is the web view's address, shown on the help line.
pub async fn run(fleet: &Fleet, select: Option<&str>, web: Option<&str>) -> io::Result<()> {
    let mut terminal = ratatui::try_init()?;
    let _ = crossterm::execute!(io::stdout(), crossterm::event::EnableMouseCapture);
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore();
        previous(info);
    }));
    let result = event_loop(&mut terminal, fleet, select, web).await;
    restore();
    let _ = std::panic::take_hook();
    result
}

fn restore() {
    let _ = crossterm::execute!(io::stdout(), crossterm::event::DisableMouseCapture);
    ratatui::restore();
}

async fn event_loop<B: Backend>(
    terminal: &mut Terminal<B>,
    fleet: &Fleet,
    select: Option<&str>,
    web: Option<&str>,
) -> io::Result<()> {
    let mut app = App::new();
    if let Some(addr) = web {
        app.show_web(addr);
    }
    app.update(fleet.snapshot());
    if let Some(name) = select {
        app.select_name(name);
    }
    let mut events = crossterm::event::EventStream::new();
    let mut changed = fleet.changed();
    let mut second = tokio::time::interval(Duration::from_secs(1));
    second.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut dirty = true;
    let mut last_draw: Option<tokio::time::Instant> = None;
    loop {
        let due = last_draw.map_or(tokio::time::Instant::now(), |t| t + MIN_REDRAW);
        if dirty && due <= tokio::time::Instant::now() {
            app.update(fleet.snapshot());
            terminal.draw(|f| app.draw(f))?;
            dirty = false;
            last_draw = Some(tokio::time::Instant::now());
        }
        tokio::select! {
            _ = second.tick() => {
                app.update(fleet.snapshot());
                app.sample();
                dirty = true;
            }
            r = changed.changed() => {
                if r.is_err() {
                    return Ok(());
                }
                dirty |= !app.is_paused();
            }
            ev = events.next() => match ev {
                Some(Ok(Event::Key(k))) => match app.key(k) {
                    Action::Quit => return Ok(()),
                    Action::Redraw => dirty = true,
                    Action::None => {}
                },
                Some(Ok(Event::Mouse(m))) => dirty |= app.mouse(m) == Action::Redraw,
                Some(Ok(Event::Resize(..))) => {
                    terminal.autoresize()?;
                    dirty = true;
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            },
            () = tokio::time::sleep_until(due), if dirty => {}
        }
    }
}

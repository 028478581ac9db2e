//! The host's side: a plugin program started as a child and spoken to as a [`Provider`].

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use orca_machines::{Capabilities, Error, Result, Settings};
use tokio::process::Child;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Code, Response, Status};

use crate::errors::error_from;
use crate::proto::v1 as pb;
use crate::proto::v1::cloud_driver_client::CloudDriverClient;
use crate::stdio::Coalesced;
use crate::wire::{bad_reply, capabilities_from};
use crate::{MAX_FRAME, MAX_MESSAGE, OWNER_ENV, PROTOCOL_VERSION, SETTINGS_ENV, WINDOW};

/// The host's environment variables a plugin gets besides its settings: what a program needs to
/// run at all (the rest of the host's environment, its secrets included, is not passed).
const PASSED_THROUGH: &[&str] = &[
    "PATH",
    "HOME",
    "TMPDIR",
    "LANG",
    "RUST_LOG",
    "RUST_BACKTRACE",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// Names no setting may take, because the program's loader and C library read them before any
/// of the plugin's code runs (glibc's list of the variables it drops for privileged programs, and
/// macOS's `DYLD_` ones): a setting could otherwise load a library into the plugin that holds the
/// credentials. Names that start with one of [`LOADER_PREFIXES`] are refused as well.
const LOADER_NAMES: &[&str] = &[
    "GCONV_PATH",
    "GETCONF_DIR",
    "GLIBC_TUNABLES",
    "HOSTALIASES",
    "LOCALDOMAIN",
    "LOCPATH",
    "NIS_PATH",
    "NLSPATH",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
    "TZDIR",
];

/// The prefixes of [`LOADER_NAMES`]' families.
const LOADER_PREFIXES: &[&str] = &["LD_", "DYLD_", "MALLOC_"];

/// What takes a plugin's standard error, one line at a time (without its line end).
pub type StderrLines = Arc<dyn Fn(&str) + Send + Sync>;

/// The longest line of a plugin's standard error handed to [`PluginCommand::stderr_lines`], in
/// bytes. A longer line is cut: its first part is handed on, ending in [`CUT_MARK`], and the rest up
/// to its line end is read and dropped. Without a bound, a plugin writing without line ends (garbage,
/// a binary dump) would grow the host's buffer until the host runs out of memory.
pub const MAX_STDERR_LINE: usize = 64 * 1024;

/// What ends a line of a plugin's standard error that was cut at [`MAX_STDERR_LINE`].
pub const CUT_MARK: &str = " [line cut]";

/// How long a start of a plugin (its program started, connected, handshake answered) may take
/// unless [`PluginCommand::start_timeout`] says otherwise. A handshake only makes the plugin's
/// provider, which reads its settings: far less than this, so that only a plugin that hangs meets it.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(60);

/// How to start a plugin: its program, the owner, and the settings put in its environment.
/// `Debug` shows the settings' names, never their values.
#[derive(Clone)]
pub struct PluginCommand {
    path: PathBuf,
    owner: String,
    settings: Settings,
    passed: Vec<String>,
    explicit: bool,
    start_timeout: Duration,
    call_timeout: Option<Duration>,
    stderr: Option<StderrLines>,
}

impl std::fmt::Debug for PluginCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginCommand")
            .field("path", &self.path)
            .field("owner", &self.owner)
            .field("settings", &self.settings.keys().collect::<Vec<_>>())
            .field("passed", &self.passed)
            .field("explicit", &self.explicit)
            .field("start_timeout", &self.start_timeout)
            .field("call_timeout", &self.call_timeout)
            .field(
                "stderr",
                &if self.stderr.is_some() {
                    "lines to the host"
                } else {
                    "inherited"
                },
            )
            .finish()
    }
}

impl PluginCommand {
    /// The plugin program at `path`, for `owner` (empty for none), with no settings.
    pub fn new(path: impl Into<PathBuf>, owner: impl Into<String>) -> Self {
        PluginCommand {
            path: path.into(),
            owner: owner.into(),
            settings: Settings::new(),
            passed: Vec::new(),
            explicit: false,
            start_timeout: DEFAULT_START_TIMEOUT,
            call_timeout: None,
            stderr: None,
        }
    }

    /// These settings (the driver's keys, as its environment variables) in the plugin's
    /// environment.
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// The setting `key` = `value` in the plugin's environment.
    pub fn setting(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.insert(key, value);
        self
    }

    /// Marks the settings as the plugin's whole configuration: the plugin is told their names in
    /// [`SETTINGS_ENV`] and makes its provider from exactly them, as [`orca::of_with`] does, so that
    /// a missing or misspelled credential is refused by name instead of taken from the host's own
    /// files (`HOME` is passed) or its machine's identity. Unmarked, a plugin reads its environment
    /// as [`orca::of`] does, the ambient chains included: for a host that means them.
    pub fn explicit_settings(mut self) -> Self {
        self.explicit = true;
        self
    }

    /// Passes the host's environment variable `name` (when set) to the plugin as well.
    pub fn pass_env(mut self, name: impl Into<String>) -> Self {
        self.passed.push(name.into());
        self
    }

    /// Fails a start of the plugin (its program started, connected, and the handshake answered)
    /// that takes longer than `limit`: the child is killed and the start answers
    /// [`Error::Transient`] naming the plugin. Restarts after a plugin died are bounded the same.
    /// Unset: [`DEFAULT_START_TIMEOUT`].
    pub fn start_timeout(mut self, limit: Duration) -> Self {
        self.start_timeout = limit;
        self
    }

    /// Fails a call the plugin has not answered within `limit` as a passing failure that may have
    /// acted (the plugin may have sent the call to its cloud: a create may have made its machine),
    /// and lets the plugin go (started again on the next call) when no other call waits on it, or
    /// at the second call in a row to time out with no answer between them. Unset: a call waits as
    /// long as the driver takes.
    /// The handshake is bounded by [`PluginCommand::start_timeout`] instead.
    pub fn call_timeout(mut self, limit: Duration) -> Self {
        self.call_timeout = Some(limit);
        self
    }

    /// Hands each line the plugin writes on its standard error (its log) to `lines`, instead of
    /// letting the plugin write on the host's own: what a host that filters its log (masks
    /// secrets, say) sets, so that a plugin's lines pass the same filter.
    pub fn stderr_lines(mut self, lines: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.stderr = Some(Arc::new(lines));
        self
    }

    /// The plugin program.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Starts the program, its pipes driven by `wire`'s runtime. The program is checked first, at
    /// every start (restarts included): it gets the settings, credentials among them, so a program
    /// or folder that another user may write is refused ([`orca_machines::fs::check_program`]).
    fn spawn(&self, wire: &Wire) -> Result<Child> {
        #[cfg(unix)]
        orca_machines::fs::check_program(&self.path).map_err(|e| {
            Error::settings(
                ["plugin"],
                format!("cannot start the plugin {}: {e}", self.path.display()),
            )
        })?;
        self.check_setting_names()?;
        let _on_wire = wire.handle.enter();
        let mut c = tokio::process::Command::new(&self.path);
        c.env_clear();
        for name in PASSED_THROUGH
            .iter()
            .copied()
            .chain(self.passed.iter().map(String::as_str))
        {
            if let Some(v) = std::env::var_os(name) {
                c.env(name, v);
            }
        }
        for key in self.settings.keys() {
            c.env(key, self.settings.get(key).unwrap_or_default());
        }
        if self.explicit {
            c.env(SETTINGS_ENV, self.settings_names()?);
        }
        c.env(OWNER_ENV, &self.owner)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if self.stderr.is_some() {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .kill_on_drop(true);
        let mut child = c.spawn().map_err(|e| {
            Error::settings(
                ["plugin"],
                format!("cannot start the plugin {}: {e}", self.path.display()),
            )
        })?;
        if let (Some(lines), Some(stderr)) = (&self.stderr, child.stderr.take()) {
            tokio::spawn(forward_lines(stderr, lines.clone()));
        }
        Ok(child)
    }

    /// Refuses, before the program starts, a setting whose name is no environment variable's, or
    /// names what is not a setting's to set: a variable the loader or C library reads
    /// ([`LOADER_NAMES`]), one the host passes on itself ([`PASSED_THROUGH`]: `PATH`, the TLS
    /// roots, ...), or the protocol's own.
    fn check_setting_names(&self) -> Result<()> {
        let not_a_name = |k: &str| k.is_empty() || k.contains([',', '=', '\0']);
        let bad: Vec<&str> = self.settings.keys().filter(|k| not_a_name(k)).collect();
        if !bad.is_empty() {
            return Err(Error::settings(
                bad,
                "not an environment variable's name (a plugin's settings are passed by name)",
            ));
        }
        let reserved = |k: &str| {
            LOADER_NAMES.contains(&k)
                || LOADER_PREFIXES.iter().any(|p| k.starts_with(p))
                || PASSED_THROUGH.contains(&k)
                || self.passed.iter().any(|p| p == k)
                || [OWNER_ENV, SETTINGS_ENV].contains(&k)
        };
        let bad: Vec<&str> = self.settings.keys().filter(|k| reserved(k)).collect();
        if !bad.is_empty() {
            return Err(Error::settings(
                bad,
                "not a plugin setting: the program's loader, C library or host sets it",
            ));
        }
        Ok(())
    }

    /// The settings' names as [`SETTINGS_ENV`] lists them (checked by
    /// [`PluginCommand::check_setting_names`]).
    fn settings_names(&self) -> Result<String> {
        Ok(self.settings.keys().collect::<Vec<_>>().join(","))
    }

    fn name(&self) -> String {
        format!("plugin {}", self.path.display())
    }
}

/// The thread that carries a plugin's connection: its pipes, the HTTP/2 connection's task and the
/// channel's queue all run on one current-thread runtime of their own. A call then crosses threads
/// twice (to this thread and back) instead of hopping between the caller's runtime's threads at
/// each step, and the connection outlives the runtime of the caller that started it.
struct Wire {
    handle: tokio::runtime::Handle,
    /// Dropped with the provider: the thread's runtime stops, and its tasks with it.
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Wire {
    fn new(command: &PluginCommand) -> Result<Wire> {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (tx, rx) = std::sync::mpsc::channel();
        let cannot = |e: &dyn std::fmt::Display| {
            Error::other(format!("{}: cannot start its thread: {e}", command.name()))
        };
        std::thread::Builder::new()
            .name("orca-plugin".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => return drop(tx.send(Err(e))),
                };
                let _ = tx.send(Ok(rt.handle().clone()));
                rt.block_on(async {
                    let _ = stopped.await;
                });
            })
            .map_err(|e| cannot(&e))?;
        let handle = rx.recv().map_err(|e| cannot(&e))?.map_err(|e| cannot(&e))?;
        Ok(Wire {
            handle,
            _stop: stop,
        })
    }
}

/// Runs the channel's tasks on the wire's thread.
#[derive(Clone)]
struct OnWire(tokio::runtime::Handle);

impl<F: Future<Output = ()> + Send + 'static> hyper::rt::Executor<F> for OnWire {
    fn execute(&self, task: F) {
        self.0.spawn(task);
    }
}

/// Hands the lines of `stderr` to `lines` until the plugin closes it (when it exits). A line that
/// is not UTF-8 is handed over with its bad bytes replaced; one longer than [`MAX_STDERR_LINE`] is
/// cut ([`cut_line`]), and the rest of it is read and dropped, so that what is held of a line never
/// grows past the bound however long the plugin writes without a line end.
async fn forward_lines(stderr: tokio::process::ChildStderr, lines: StderrLines) {
    use tokio::io::AsyncBufReadExt;
    let mut reader = tokio::io::BufReader::new(stderr);
    let mut line = Vec::new();
    let mut cut = false;
    loop {
        let (used, ended) = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(buf) => {
                let end = buf.iter().position(|&b| b == b'\n');
                let part = &buf[..end.unwrap_or(buf.len())];
                let room = MAX_STDERR_LINE.saturating_sub(line.len());
                line.extend_from_slice(&part[..part.len().min(room)]);
                cut |= part.len() > room;
                (end.map_or(buf.len(), |e| e + 1), end.is_some())
            }
        };
        reader.consume(used);
        if ended {
            lines(&cut_line(&line, cut));
            line.clear();
            cut = false;
        }
    }
    // The last line, when the plugin ended without a line end.
    if !line.is_empty() {
        lines(&cut_line(&line, cut));
    }
}

/// A line of a plugin's standard error as it is handed on: its bad UTF-8 replaced, its line end
/// dropped, and at most [`MAX_STDERR_LINE`] bytes long, ending in [`CUT_MARK`] when it was `cut`
/// already or is longer (each replaced byte takes three, so the text can outgrow the bytes read).
fn cut_line(bytes: &[u8], cut: bool) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_end_matches('\r');
    if !cut && text.len() <= MAX_STDERR_LINE {
        return text.to_string();
    }
    let mut keep = MAX_STDERR_LINE - CUT_MARK.len();
    while !text.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}{CUT_MARK}", &text[..keep.min(text.len())])
}

/// A plugin that runs, with its connection.
struct Conn {
    child: Child,
    channel: Channel,
    generation: u64,
    calls: Arc<Calls>,
}

/// The calls of one plugin: those waiting on it now, and those that timed out since it last
/// answered one.
#[derive(Default)]
struct Calls {
    in_flight: AtomicUsize,
    unanswered: AtomicU32,
}

/// A call's hold on the plugin it waits on: counted in its calls in flight until dropped.
struct InFlight(Arc<Calls>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What the handshake told of the plugin.
#[derive(Debug, Clone)]
struct Told {
    kind: String,
    owner: String,
    capabilities: Capabilities,
    extensions: Vec<&'static str>,
    network_name: String,
}

/// A [`Provider`](orca_machines::Provider) that is a plugin program, started as a child on
/// [`PluginProvider::start`] and kept; the child is killed when this is dropped.
///
/// A call whose plugin dies (or breaks the protocol, or outlives [`PluginCommand::call_timeout`])
/// fails as [`Error::Transient`] that may have acted (retryable, never made-nothing: a create may
/// have happened), and the next call starts the plugin again. Errors the driver answers keep their
/// kind and retry meaning.
pub struct PluginProvider {
    command: PluginCommand,
    wire: Wire,
    told: Told,
    conn: tokio::sync::Mutex<Option<Conn>>,
    generation: AtomicU64,
}

impl std::fmt::Debug for PluginProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginProvider")
            .field("command", &self.command)
            .field("kind", &self.told.kind)
            .field("owner", &self.told.owner)
            .field("starts", &self.starts())
            .finish()
    }
}

const EXTENSION_NAMES: [&str; 4] = [
    "machine_labels",
    "firewall_rules",
    "ssh_admission",
    "credit_balance",
];

fn told(hello: pb::Hello) -> Told {
    Told {
        capabilities: capabilities_from(&hello.capabilities.unwrap_or_default()),
        extensions: EXTENSION_NAMES
            .iter()
            .copied()
            .filter(|n| hello.extensions.iter().any(|e| e == n))
            .collect(),
        kind: hello.kind,
        owner: hello.owner,
        network_name: hello.network_name,
    }
}

/// A failure of the plugin or its stream (not an answer of the driver).
fn stream_failure(command: &PluginCommand, op: &str, s: &Status) -> Error {
    if s.code() == Code::Unimplemented {
        return Error::unsupported(command.name(), op);
    }
    Error::transient(format!(
        "{} failed during {op} ({}), and {op} may have acted all the same; the plugin is started \
         again once it exited, no other call waits on it, or calls keep failing",
        command.name(),
        s.message()
    ))
    .with_operation(op)
    .with_may_have_acted()
}

/// A call the plugin did not answer in time: it is let go when no other call waits on it, or when
/// it answered nothing since the call before timed out, and started again on the next call. The
/// plugin may have sent the call to its cloud before it stopped answering, so the call may have
/// acted (a create may have made its machine): the error is marked so, and says it.
fn timed_out(command: &PluginCommand, op: &str, limit: Duration) -> Error {
    Error::transient(format!(
        "{} did not answer {op} within {limit:?}, and {op} may have acted all the same; \
         the plugin is started again once no other call waits on it, or at the next call to \
         time out unanswered",
        command.name()
    ))
    .with_operation(op)
    .with_may_have_acted()
}

async fn connect(command: &PluginCommand, wire: &Wire, child: &mut Child) -> Result<Channel> {
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(Error::other(format!("{}: no stdio", command.name())));
    };
    widen_pipe(&stdin);
    widen_pipe(&stdout);
    let io = Arc::new(std::sync::Mutex::new(Some(Coalesced::new(
        tokio::io::join(stdout, stdin),
    ))));
    let connector = tower::service_fn(move |_: Uri| {
        let io = io.lock().unwrap_or_else(|p| p.into_inner()).take();
        async move {
            io.map(hyper_util::rt::TokioIo::new).ok_or_else(|| {
                std::io::Error::other("the plugin's stream is gone; it is started again")
            })
        }
    });
    Endpoint::from_static("http://plugin.invalid")
        .initial_stream_window_size(WINDOW)
        .initial_connection_window_size(WINDOW)
        .max_frame_size(MAX_FRAME)
        .executor(OnWire(wire.handle.clone()))
        .connect_with_connector(connector)
        .await
        .map_err(|e| {
            Error::transient(format!("{}: cannot connect: {e}", command.name()))
                .with_operation("handshake")
        })
}

/// The most a pipe may hold that an unprivileged process can ask for (Linux's default
/// `/proc/sys/fs/pipe-max-size`).
#[cfg(target_os = "linux")]
const PIPE_SIZE: usize = 1024 * 1024;

/// Lets the pipe to or from the plugin hold `PIPE_SIZE` instead of 64 KiB, so that a large reply
/// crosses in one write and one read instead of waking each side at every 64 KiB. Where the system
/// refuses, the pipe stays as it is: slower, never wrong.
#[cfg(target_os = "linux")]
fn widen_pipe(pipe: &impl std::os::fd::AsFd) {
    let _ = rustix::pipe::fcntl_setpipe_size(pipe, PIPE_SIZE);
}

#[cfg(not(target_os = "linux"))]
fn widen_pipe<T>(_: &T) {}

fn client(channel: Channel) -> CloudDriverClient<Channel> {
    CloudDriverClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE)
}

/// Starts the plugin and shakes hands, within the command's start timeout: what it is, or why it
/// cannot be used. A start past the timeout drops the child, which kills it (`kill_on_drop`), so a
/// plugin that never answers neither holds its caller nor lives on.
async fn launch(command: &PluginCommand, wire: &Wire) -> Result<(Child, Channel, pb::Hello)> {
    let limit = command.start_timeout;
    tokio::time::timeout(limit, launch_unbounded(command, wire))
        .await
        .unwrap_or_else(|_| {
            Err(Error::transient(format!(
                "{} did not start within {limit:?} (no answer to the handshake); it was killed",
                command.name()
            ))
            .with_operation("handshake"))
        })
}

async fn launch_unbounded(
    command: &PluginCommand,
    wire: &Wire,
) -> Result<(Child, Channel, pb::Hello)> {
    let mut child = command.spawn(wire)?;
    let channel = connect(command, wire, &mut child).await?;
    let mut c = client(channel.clone());
    let reply = c
        .handshake(pb::HandshakeRequest {
            protocol_version: PROTOCOL_VERSION,
        })
        .await
        .map_err(|s| stream_failure(command, "handshake", &s))?
        .into_inner();
    if reply.protocol_version != PROTOCOL_VERSION {
        return Err(Error::unsupported(
            command.name(),
            format!(
                "CloudDriver protocol version {PROTOCOL_VERSION} (this host's): \
                 it speaks version {}",
                reply.protocol_version
            ),
        ));
    }
    match reply.outcome {
        Some(pb::handshake_reply::Outcome::Hello(h)) => Ok((child, channel, h)),
        Some(pb::handshake_reply::Outcome::Error(e)) => Err(error_from(e)),
        None => Err(bad_reply("a handshake without its outcome")),
    }
}

impl PluginProvider {
    /// Starts the plugin `command` names and shakes hands with it: a plugin that speaks another
    /// protocol version is refused ([`Error::Unsupported`] naming both versions), one that cannot
    /// make its provider answers why (its settings named), one that cannot be started is
    /// [`Error::InvalidSettings`] naming the program.
    pub async fn start(command: PluginCommand) -> Result<Self> {
        let wire = Wire::new(&command)?;
        let (child, channel, hello) = launch(&command, &wire).await?;
        let told = told(hello);
        if told.owner != command.owner {
            return Err(Error::other(format!(
                "{} serves owner {:?}, not {:?}",
                command.name(),
                told.owner,
                command.owner
            )));
        }
        Ok(PluginProvider {
            command,
            wire,
            told,
            conn: tokio::sync::Mutex::new(Some(Conn {
                child,
                channel,
                generation: 1,
                calls: Arc::default(),
            })),
            generation: AtomicU64::new(1),
        })
    }

    /// How many times the plugin was started.
    pub fn starts(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The process id of the plugin running now, if one runs.
    pub async fn pid(&self) -> Option<u32> {
        self.conn.lock().await.as_ref().and_then(|c| c.child.id())
    }

    /// The command this plugin was started with.
    pub fn command(&self) -> &PluginCommand {
        &self.command
    }

    /// The connection to the plugin (started again if it died): to reach the other services a
    /// plugin may serve beside CloudDriver.
    pub async fn channel(&self) -> Result<Channel> {
        Ok(self.connection().await?.0)
    }

    /// The running plugin's channel and generation, starting it when none runs, and the hold on
    /// it of the call about to be made.
    async fn connection(&self) -> Result<(Channel, u64, InFlight)> {
        let mut held = self.conn.lock().await;
        if let Some(c) = held.as_mut() {
            if matches!(c.child.try_wait(), Ok(None)) {
                c.calls.in_flight.fetch_add(1, Ordering::SeqCst);
                let hold = InFlight(c.calls.clone());
                return Ok((c.channel.clone(), c.generation, hold));
            }
            tracing::warn!("{} exited; starting it again", self.command.name());
        }
        *held = None;
        let (child, channel, hello) = launch(&self.command, &self.wire).await?;
        let now = told(hello);
        if (now.kind.as_str(), now.owner.as_str()) != (&*self.told.kind, &*self.told.owner) {
            return Err(Error::other(format!(
                "{} restarted as kind {:?} owner {:?}, not {:?} {:?}",
                self.command.name(),
                now.kind,
                now.owner,
                self.told.kind,
                self.told.owner
            )));
        }
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let calls = Arc::new(Calls::default());
        calls.in_flight.fetch_add(1, Ordering::SeqCst);
        *held = Some(Conn {
            child,
            channel: channel.clone(),
            generation,
            calls: calls.clone(),
        });
        Ok((channel, generation, InFlight(calls)))
    }

    /// After a call of `generation` timed out or its stream failed: lets that plugin go (it is
    /// killed, unless it was replaced already) when no other call waits on it, or when this is the
    /// second call in a row to fail with no answer between them. One call past its timeout may be
    /// one slow call, and one failed stream one call's failure: the others in flight may yet be
    /// answered, and a plugin killed under them may leave a create half made. A plugin that
    /// answers nothing while calls keep coming is let go.
    async fn failed_on(&self, generation: u64) {
        let mut held = self.conn.lock().await;
        let hung = |c: &Conn| {
            let unanswered = c.calls.unanswered.fetch_add(1, Ordering::SeqCst) + 1;
            unanswered >= 2 || c.calls.in_flight.load(Ordering::SeqCst) == 0
        };
        if held
            .as_ref()
            .is_some_and(|c| c.generation == generation && hung(c))
        {
            *held = None;
        }
    }

    /// One call: `f` on the plugin's client; a failure of the plugin or its stream is a passing
    /// failure, and the plugin is started again as `failed_on` says (a plugin that exited, at the
    /// next call).
    pub(crate) async fn call<T, F, Fut>(&self, op: &'static str, f: F) -> Result<T>
    where
        F: FnOnce(CloudDriverClient<Channel>) -> Fut,
        Fut: Future<Output = std::result::Result<Response<T>, Status>>,
    {
        let (channel, generation, hold) = self.connection().await?;
        let answer = f(client(channel));
        let answer = match self.command.call_timeout {
            None => answer.await,
            Some(limit) => match tokio::time::timeout(limit, answer).await {
                Ok(a) => a,
                Err(_) => {
                    drop(hold);
                    self.failed_on(generation).await;
                    return Err(timed_out(&self.command, op, limit));
                }
            },
        };
        match answer {
            Err(s) if s.code() != Code::Unimplemented => {
                drop(hold);
                self.failed_on(generation).await;
                Err(stream_failure(&self.command, op, &s))
            }
            answered => {
                hold.0.unanswered.store(0, Ordering::SeqCst);
                answered
                    .map(Response::into_inner)
                    .map_err(|s| stream_failure(&self.command, op, &s))
            }
        }
    }

    pub(crate) fn told_kind(&self) -> &str {
        &self.told.kind
    }
    pub(crate) fn told_owner(&self) -> &str {
        &self.told.owner
    }
    pub(crate) fn told_capabilities(&self) -> Capabilities {
        self.told.capabilities
    }
    pub(crate) fn offers(&self, extension: &str) -> bool {
        self.told.extensions.contains(&extension)
    }
    pub(crate) fn network_name(&self) -> &str {
        &self.told.network_name
    }
}

mod calls;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_line_is_at_most_the_bound_even_where_bad_bytes_grow_into_replacements() {
        assert_eq!(cut_line(b"plain\r", false), "plain");
        // Each byte that is not UTF-8 becomes a three-byte replacement: the text outgrows the bytes.
        for (bytes, cut) in [
            (vec![0xff; MAX_STDERR_LINE], false),
            (vec![b'x'; MAX_STDERR_LINE], true),
            ("é".repeat(MAX_STDERR_LINE / 2).into_bytes(), true),
        ] {
            let line = cut_line(&bytes, cut);
            assert!(line.len() <= MAX_STDERR_LINE, "{}", line.len());
            assert!(line.ends_with(CUT_MARK));
        }
        let whole = vec![b'x'; MAX_STDERR_LINE];
        assert_eq!(
            cut_line(&whole, false).len(),
            MAX_STDERR_LINE,
            "a line at the bound is whole"
        );
    }
}

//! One error type for every driver, with retry meaning ([contract](crate::contract) 11).

use std::time::Duration;

/// The result type of every orca call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A cause kept with an error: the transport, decoding or SDK error the driver met (never a secret:
/// drivers put only errors that carry no credentials here).
pub type Source = std::sync::Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Where a cloud error came from: the operation, how hard it was tried, the cloud's own error code
/// and the cause. Every variant that a cloud call can produce carries one; [`Error::context`] reads
/// it whatever the variant.
///
/// Equality compares the operation, the retry count and the code, not the cause nor the mark
/// [`Context::may_have_acted`].
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct Context {
    /// The cloud call (`instances.insert`, `RunInstances`, `create_server`, ...).
    pub operation: Option<String>,
    /// How many times the call was retried before this error was given up on.
    pub retries: u32,
    /// The cloud's own error code (`ZONE_RESOURCE_POOL_EXHAUSTED`, `InsufficientInstanceCapacity`,
    /// `resource_unavailable`, `NicReservedForAnotherVm`, `conditionNotMet`, ...): what a driver matches
    /// on, never its message text.
    pub code: Option<String>,
    /// The underlying error, returned by [`std::error::Error::source`].
    pub source: Option<Source>,
    /// Whether an attempt of the call ended in a passing failure (a dropped connection, a timeout, a
    /// 5xx: the cloud may have acted on it), whatever the last attempt answered. The shared retry
    /// loop ([`crate::RetryPolicy::retry`], and so [`crate::kit::call`]) sets it; a throttling answer
    /// or a refusal was not acted on and leaves it unset. [`Error::made_nothing`] reads it.
    pub may_have_acted: bool,
    /// What the clean-up after a failed create could not remove (kind and id, as
    /// [`Error::Leftovers`] names them), for a no stock or quota that stays what it is
    /// ([`Error::with_leftovers`]); empty otherwise. [`Error::left`] reads it.
    pub left: Vec<String>,
}

impl Context {
    /// An empty context.
    pub fn new() -> Self {
        Self::default()
    }
}

impl PartialEq for Context {
    fn eq(&self, other: &Self) -> bool {
        self.operation == other.operation
            && self.retries == other.retries
            && self.code == other.code
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Context");
        if let Some(o) = &self.operation {
            d.field("operation", o);
        }
        if self.retries > 0 {
            d.field("retries", &self.retries);
        }
        if let Some(c) = &self.code {
            d.field("code", c);
        }
        if let Some(s) = &self.source {
            d.field("source", &format_args!("{s}"));
        }
        if self.may_have_acted {
            d.field("may_have_acted", &true);
        }
        if !self.left.is_empty() {
            d.field("left", &self.left);
        }
        d.finish()
    }
}

impl std::fmt::Display for Context {
    /// ` (operation, code, after N retries)`, or nothing when the context is empty.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let retries = (self.retries > 0).then(|| {
            let plural = if self.retries == 1 { "y" } else { "ies" };
            format!("after {} retr{plural}", self.retries)
        });
        let parts: Vec<String> = self.operation.iter().cloned().chain(retries).collect();
        if parts.is_empty() {
            Ok(())
        } else {
            write!(f, " [{}]", parts.join(", "))
        }
    }
}

/// Everything that can go wrong when making, listing or removing machines.
///
/// Each driver maps its cloud's codes onto these variants in one function, so that a caller can decide
/// what to do without knowing which cloud answered: [`Error::is_retryable`] says whether the same call
/// may succeed later, [`Error::retry_after`] how long the cloud asked to wait. Errors from a cloud call
/// carry a [`Context`] (operation, retries, the cloud's code, the cause: [`Error::context`],
/// [`std::error::Error::source`]); build them with the constructors ([`Error::not_found`],
/// [`Error::quota`], ...) and [`Error::with_operation`], [`Error::with_code`], [`Error::with_source`].
///
/// Messages never carry secrets: drivers build them from the cloud's error code and message only.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// The input is invalid: `field` names what is wrong, `rule` says what it must be. Raised before
    /// any network call.
    InvalidSpec {
        /// The field at fault (`name`, `pool`, `owner`, `machine_type`, `id`, ...).
        field: String,
        /// The rule it breaks, with the offending value where that is safe to show.
        rule: String,
    },
    /// The settings are incomplete or wrong: `keys` names every setting at fault (for example
    /// environment variables).
    InvalidSettings {
        /// Every setting at fault, all at once.
        keys: Vec<String>,
        /// What is wrong with them.
        message: String,
    },
    /// The thing asked for does not exist (a machine type, an image, a location).
    NotFound {
        /// What was not found.
        what: String,
        /// Where the error came from.
        context: Box<Context>,
    },
    /// Something of that name exists already and is not this owner's to adopt.
    AlreadyExists {
        /// What exists already.
        what: String,
        /// Where the error came from.
        context: Box<Context>,
    },
    /// The machine exists but this provider's owner did not create it; nothing was changed.
    NotOwned {
        /// The machine's id.
        id: String,
        /// This provider's owner (empty for none).
        owner: String,
    },
    /// The cloud has no stock of `machine_type` in `location` right now: try again later or elsewhere.
    NoStock {
        /// The machine type that is out of stock.
        machine_type: String,
        /// Where it is out of stock.
        location: String,
        /// The cloud's own words.
        message: String,
        /// Where the error came from.
        context: Box<Context>,
    },
    /// An account limit (quota) would be exceeded. Not capacity: trying elsewhere will not help.
    Quota {
        /// The cloud's own words, naming the limit where it does.
        message: String,
        /// Where the error came from.
        context: Box<Context>,
    },
    /// The cloud throttled the call; retry after the given time.
    Throttled {
        /// How long the cloud asked to wait, if it said.
        retry_after: Option<Duration>,
        /// The cloud's own words.
        message: String,
        /// Where the error came from.
        context: Box<Context>,
    },
    /// The resource is locked by another operation that is still running (Azure's
    /// `AnotherOperationInProgress`, Hetzner's `locked`, Compute Engine's `resourceNotReady`): the
    /// same call will succeed once that operation ends, which can take as long as the operation
    /// itself. The retry policy waits for it up to [`RetryPolicy::busy_wait`](crate::RetryPolicy::busy_wait).
    Busy {
        /// The cloud's own words, naming the operation holding the resource where it does.
        message: String,
        /// Where the error came from.
        context: Box<Context>,
    },
    /// The credentials were missing, expired or refused.
    Unauthenticated {
        /// Why (never the credential itself).
        message: String,
        /// Where the error came from.
        context: Box<Context>,
    },
    /// The credentials are valid but lack a permission, or a policy denied the call.
    PermissionDenied {
        /// The cloud's own words, naming the permission or policy where it does.
        message: String,
        /// Where the error came from.
        context: Box<Context>,
    },
    /// This driver cannot do `operation`. Raised before any network call.
    Unsupported {
        /// The driver kind (`hetzner`, `ec2`, ...).
        provider: String,
        /// The operation asked for.
        operation: String,
    },
    /// A passing failure (5xx, dropped connection, timeout): the same call may succeed later.
    /// For a create, the machine may or may not have been made: retrying the same spec adopts it.
    Transient {
        /// What happened.
        message: String,
        /// Where the error came from.
        context: Box<Context>,
    },
    /// A call failed after it had made resources, and removing some of them failed too:
    /// `left` names every resource still held by the cloud.
    Leftovers {
        /// The failure that started the clean-up.
        error: Box<Error>,
        /// The resources that remain (kind and id), to be removed by hand or by a later delete.
        left: Vec<String>,
    },
    /// Anything else, with the cloud's words.
    Other {
        /// What happened.
        message: String,
        /// Where the error came from.
        context: Box<Context>,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::InvalidSpec { field, rule } => write!(f, "invalid {field}: {rule}"),
            Error::InvalidSettings { keys, message } => {
                write!(f, "invalid settings ({}): {message}", keys.join(", "))
            }
            Error::NotFound { what, context } => write!(f, "not found: {what}{context}"),
            Error::AlreadyExists { what, context } => {
                write!(f, "already exists: {what}{context}")
            }
            Error::NotOwned { id, owner } => write!(
                f,
                "machine {id} does not belong to this owner ({owner:?}) and pool labels; refused"
            ),
            Error::NoStock {
                machine_type,
                location,
                message,
                context,
            } => write!(
                f,
                "no stock of {machine_type} in {location}: {message}{context}"
            ),
            Error::Quota { message, context } => write!(f, "quota exceeded: {message}{context}"),
            Error::Throttled {
                retry_after,
                message,
                context,
            } => {
                f.write_str("throttled")?;
                if let Some(d) = retry_after {
                    write!(f, " (retry after {} ms)", d.as_millis())?;
                }
                write!(f, ": {message}{context}")
            }
            Error::Busy { message, context } => {
                write!(f, "busy with another operation: {message}{context}")
            }
            Error::Unauthenticated { message, context } => {
                write!(f, "unauthenticated: {message}{context}")
            }
            Error::PermissionDenied { message, context } => {
                write!(f, "permission denied: {message}{context}")
            }
            Error::Unsupported {
                provider,
                operation,
            } => write!(f, "{provider} does not support {operation}"),
            Error::Transient { message, context } => {
                write!(f, "transient failure: {message}{context}")
            }
            Error::Leftovers { error, left } => {
                write!(f, "{error}; could not remove: {}", left.join(", "))
            }
            Error::Other { message, context } => write!(f, "{message}{context}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Leftovers { error, .. } => Some(&**error),
            other => other
                .context()
                .and_then(|c| c.source.as_deref())
                .map(|s| s as &(dyn std::error::Error + 'static)),
        }
    }
}

crate::words! {
    /// The kind of an [`Error`], without its details: for matching, metrics and fault injection.
    /// `ErrorKind::ALL` is every kind, for tables that must cover them all (a wire mapping, metrics,
    /// tests).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
    #[serde(rename_all = "snake_case")]
    #[non_exhaustive]
    pub enum ErrorKind {
        /// [`Error::InvalidSpec`]
        InvalidSpec = "invalid_spec",
        /// [`Error::InvalidSettings`]
        InvalidSettings = "invalid_settings",
        /// [`Error::NotFound`]
        NotFound = "not_found",
        /// [`Error::AlreadyExists`]
        AlreadyExists = "already_exists",
        /// [`Error::NotOwned`]
        NotOwned = "not_owned",
        /// [`Error::NoStock`]
        NoStock = "no_stock",
        /// [`Error::Quota`]
        Quota = "quota",
        /// [`Error::Throttled`]
        Throttled = "throttled",
        /// [`Error::Busy`]
        Busy = "busy",
        /// [`Error::Unauthenticated`]
        Unauthenticated = "unauthenticated",
        /// [`Error::PermissionDenied`]
        PermissionDenied = "permission_denied",
        /// [`Error::Unsupported`]
        Unsupported = "unsupported",
        /// [`Error::Transient`]
        Transient = "transient",
        /// [`Error::Leftovers`]
        Leftovers = "leftovers",
        /// [`Error::Other`]
        Other = "other",
    }
}

impl Error {
    /// The kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidSpec { .. } => ErrorKind::InvalidSpec,
            Error::InvalidSettings { .. } => ErrorKind::InvalidSettings,
            Error::NotFound { .. } => ErrorKind::NotFound,
            Error::AlreadyExists { .. } => ErrorKind::AlreadyExists,
            Error::NotOwned { .. } => ErrorKind::NotOwned,
            Error::NoStock { .. } => ErrorKind::NoStock,
            Error::Quota { .. } => ErrorKind::Quota,
            Error::Throttled { .. } => ErrorKind::Throttled,
            Error::Busy { .. } => ErrorKind::Busy,
            Error::Unauthenticated { .. } => ErrorKind::Unauthenticated,
            Error::PermissionDenied { .. } => ErrorKind::PermissionDenied,
            Error::Unsupported { .. } => ErrorKind::Unsupported,
            Error::Transient { .. } => ErrorKind::Transient,
            Error::Leftovers { .. } => ErrorKind::Leftovers,
            Error::Other { .. } => ErrorKind::Other,
        }
    }

    /// Whether the same call may succeed if made again later (throttling, a resource busy with
    /// another operation, passing failures).
    ///
    /// No stock is not retryable in this sense: the same create will most likely fail again now;
    /// a caller should wait or try another type or location.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Throttled { .. } | Error::Busy { .. } | Error::Transient { .. }
        )
    }

    /// How long the cloud asked to wait before the next call, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Throttled { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// An [`Error::InvalidSpec`].
    pub fn invalid(field: impl Into<String>, rule: impl Into<String>) -> Self {
        Error::InvalidSpec {
            field: field.into(),
            rule: rule.into(),
        }
    }

    /// An [`Error::InvalidSettings`] naming one or more keys.
    pub fn settings<I, S>(keys: I, message: impl Into<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Error::InvalidSettings {
            keys: keys.into_iter().map(Into::into).collect(),
            message: message.into(),
        }
    }

    /// An [`Error::Unsupported`].
    pub fn unsupported(provider: impl Into<String>, operation: impl Into<String>) -> Self {
        Error::Unsupported {
            provider: provider.into(),
            operation: operation.into(),
        }
    }

    /// An [`Error::NotFound`].
    pub fn not_found(what: impl Into<String>) -> Self {
        Error::NotFound {
            what: what.into(),
            context: Box::default(),
        }
    }

    /// An [`Error::AlreadyExists`].
    pub fn already_exists(what: impl Into<String>) -> Self {
        Error::AlreadyExists {
            what: what.into(),
            context: Box::default(),
        }
    }

    /// An [`Error::NotOwned`].
    pub fn not_owned(id: impl Into<String>, owner: impl Into<String>) -> Self {
        Error::NotOwned {
            id: id.into(),
            owner: owner.into(),
        }
    }

    /// An [`Error::NoStock`] of `machine_type` in `location`.
    pub fn no_stock(
        machine_type: impl Into<String>,
        location: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Error::NoStock {
            machine_type: machine_type.into(),
            location: location.into(),
            message: message.into(),
            context: Box::default(),
        }
    }

    /// An [`Error::Quota`].
    pub fn quota(message: impl Into<String>) -> Self {
        Error::Quota {
            message: message.into(),
            context: Box::default(),
        }
    }

    /// An [`Error::Throttled`].
    pub fn throttled(retry_after: Option<Duration>, message: impl Into<String>) -> Self {
        Error::Throttled {
            retry_after,
            message: message.into(),
            context: Box::default(),
        }
    }

    /// An [`Error::Busy`]: the resource is locked by another operation still running.
    pub fn busy(message: impl Into<String>) -> Self {
        Error::Busy {
            message: message.into(),
            context: Box::default(),
        }
    }

    /// An [`Error::Unauthenticated`].
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Error::Unauthenticated {
            message: message.into(),
            context: Box::default(),
        }
    }

    /// An [`Error::PermissionDenied`].
    pub fn permission_denied(message: impl Into<String>) -> Self {
        Error::PermissionDenied {
            message: message.into(),
            context: Box::default(),
        }
    }

    /// An [`Error::Transient`].
    pub fn transient(message: impl Into<String>) -> Self {
        Error::Transient {
            message: message.into(),
            context: Box::default(),
        }
    }

    /// An [`Error::Leftovers`]: `error` started a clean-up that could not remove `left`.
    pub fn leftovers(error: Error, left: Vec<String>) -> Self {
        Error::Leftovers {
            error: Box::new(error),
            left,
        }
    }

    /// The answer of a call that failed with this error and whose clean-up could not remove `left`:
    /// no stock and quota stay what they are, with what remains named in their message and kept in
    /// their context for [`Error::left`] (callers fall back on another offering, or cool down, on
    /// those kinds alone; [`Error::Leftovers`] has no place for both); any other error becomes
    /// [`Error::Leftovers`]. With nothing left, the
    /// error itself. [`Provider::delete_named`](crate::Provider::delete_named) of the machine's
    /// name removes what remains (no listing shows a piece without its machine); the error is no
    /// longer [`made_nothing`](Error::made_nothing).
    pub fn with_leftovers(mut self, left: Vec<String>) -> Self {
        if left.is_empty() {
            return self;
        }
        let listed = left.join(", ");
        let named = |message: &mut String| {
            *message = format!(
                "{message}; the clean-up could not remove: {listed} (delete_named of its name removes them)"
            );
        };
        match &mut self {
            Error::NoStock {
                machine_type,
                location,
                message,
                ..
            } => {
                tracing::warn!(%machine_type, %location, left = %listed, "no stock; the clean-up left resources behind");
                named(message);
            }
            Error::Quota { message, .. } => {
                tracing::warn!(left = %listed, "quota exceeded; the clean-up left resources behind");
                named(message);
            }
            _ => return Error::leftovers(self, left),
        }
        self.keeping_left(left)
    }

    /// This no stock or quota with `left` kept in its context, its message as it is; what is left
    /// stands in the cloud, so the call did not make nothing.
    pub(crate) fn keeping_left(mut self, left: Vec<String>) -> Self {
        if left.is_empty() {
            return self;
        }
        if let Some(c) = self.context_mut() {
            c.left.extend(left);
        }
        self.with_may_have_acted()
    }

    /// What the clean-up after this failed call could not remove: the list of an
    /// [`Error::Leftovers`], or of a no stock or quota marked by [`Error::with_leftovers`]; empty
    /// when nothing is known to remain. [`Provider::delete_named`](crate::Provider::delete_named) of
    /// the machine's name removes it.
    pub fn left(&self) -> &[String] {
        match self {
            Error::Leftovers { left, .. } => left,
            other => other.context().map_or(&[], |c| c.left.as_slice()),
        }
    }

    /// An [`Error::Other`].
    pub fn other(message: impl Into<String>) -> Self {
        Error::Other {
            message: message.into(),
            context: Box::default(),
        }
    }

    /// The context of an error that came from a cloud call (of the first error, for
    /// [`Error::Leftovers`]); `None` for errors raised before any call.
    pub fn context(&self) -> Option<&Context> {
        match self {
            Error::NotFound { context, .. }
            | Error::AlreadyExists { context, .. }
            | Error::NoStock { context, .. }
            | Error::Quota { context, .. }
            | Error::Throttled { context, .. }
            | Error::Busy { context, .. }
            | Error::Unauthenticated { context, .. }
            | Error::PermissionDenied { context, .. }
            | Error::Transient { context, .. }
            | Error::Other { context, .. } => Some(&**context),
            Error::Leftovers { error, .. } => error.context(),
            Error::InvalidSpec { .. }
            | Error::InvalidSettings { .. }
            | Error::NotOwned { .. }
            | Error::Unsupported { .. } => None,
        }
    }

    /// This error with `context` in place of its own, for a kind that carries one (the first
    /// error's, for [`Error::Leftovers`]); an error raised before any call carries none and comes
    /// back unchanged.
    pub fn replace_context(self, context: Context) -> Self {
        self.with_context(|c| *c = context)
    }

    fn context_mut(&mut self) -> Option<&mut Context> {
        match self {
            Error::NotFound { context, .. }
            | Error::AlreadyExists { context, .. }
            | Error::NoStock { context, .. }
            | Error::Quota { context, .. }
            | Error::Throttled { context, .. }
            | Error::Busy { context, .. }
            | Error::Unauthenticated { context, .. }
            | Error::PermissionDenied { context, .. }
            | Error::Transient { context, .. }
            | Error::Other { context, .. } => Some(&mut **context),
            Error::Leftovers { error, .. } => error.context_mut(),
            Error::InvalidSpec { .. }
            | Error::InvalidSettings { .. }
            | Error::NotOwned { .. }
            | Error::Unsupported { .. } => None,
        }
    }

    /// The cloud's own error code, when the driver kept it: what code matches, never message text.
    pub fn code(&self) -> Option<&str> {
        self.context().and_then(|c| c.code.as_deref())
    }

    /// The operation that failed, when known.
    pub fn operation(&self) -> Option<&str> {
        self.context().and_then(|c| c.operation.as_deref())
    }

    /// How many times the failed call was retried before it was given up on.
    pub fn retries(&self) -> u32 {
        self.context().map_or(0, |c| c.retries)
    }

    /// Whether an attempt of the failed call ended in a passing failure, so that the cloud may have
    /// acted on it ([`Context::may_have_acted`]; for [`Error::Leftovers`], of the first failure). A
    /// [`Error::Transient`] from a cloud call is marked so by the retry loop itself.
    pub fn may_have_acted(&self) -> bool {
        self.context().is_some_and(|c| c.may_have_acted)
    }

    /// Whether this error surely means that the call changed nothing at the cloud: a refusal
    /// (invalid spec or settings, not found, already exists, not owned, no stock, quota, throttled,
    /// busy, unauthenticated, permission denied, unsupported) with no attempt that may have acted
    /// ([`Error::may_have_acted`]). False for [`Error::Transient`] (the cloud may have acted on it),
    /// [`Error::Other`] (unknown), [`Error::Leftovers`] (something was made and remains), and for a
    /// refusal that came after an attempt that may have acted: a create whose first attempt timed out
    /// after the cloud made the machine, and whose retry was refused (the name is taken now, the quota
    /// is full now), made that machine.
    ///
    /// What a caller does with it: a create that failed with `made_nothing()` can give its name up
    /// and forget it; otherwise it reads [`Provider::machine_named`](crate::Provider::machine_named)
    /// before giving the name up (and keeps the name recorded while that read fails or finds nothing
    /// yet, as a cloud can show a new machine late).
    ///
    /// ```
    /// use orca_machines::Error;
    /// assert!(Error::quota("cores").made_nothing());
    /// assert!(!Error::quota("cores").with_may_have_acted().made_nothing());
    /// assert!(!Error::transient("connection reset").made_nothing());
    /// ```
    pub fn made_nothing(&self) -> bool {
        use ErrorKind as K;
        let refusal = matches!(
            self.kind(),
            K::InvalidSpec
                | K::InvalidSettings
                | K::NotFound
                | K::AlreadyExists
                | K::NotOwned
                | K::NoStock
                | K::Quota
                | K::Throttled
                | K::Busy
                | K::Unauthenticated
                | K::PermissionDenied
                | K::Unsupported
        );
        refusal && !self.may_have_acted()
    }

    /// This error marked as the answer of a call that an attempt may have acted on
    /// ([`Error::may_have_acted`]): what the retry loop does when any attempt ended in a passing
    /// failure. An error that carries no [`Context`] ([`Error::InvalidSpec`],
    /// [`Error::InvalidSettings`], [`Error::NotOwned`], [`Error::Unsupported`]: raised by a driver's
    /// own checks, which cannot follow a sent attempt unless a cloud's answer was mapped onto them)
    /// cannot hold the mark: it becomes an [`Error::Other`] with the same words, keeping the
    /// original as its source, so that the mark is never lost.
    pub fn with_may_have_acted(mut self) -> Self {
        if let Some(c) = self.context_mut() {
            c.may_have_acted = true;
            return self;
        }
        let mut other = Error::other(self.to_string());
        if let Some(c) = other.context_mut() {
            c.may_have_acted = true;
            c.source = Some(std::sync::Arc::new(self));
        }
        other
    }

    /// This error naming `operation` as the call that failed (kept when one is named already).
    pub fn with_operation(self, operation: impl Into<String>) -> Self {
        self.with_context(|c| {
            c.operation.get_or_insert_with(|| operation.into());
        })
    }

    /// This error with the cloud's own error code.
    pub fn with_code(self, code: impl Into<String>) -> Self {
        self.with_context(|c| c.code = Some(code.into()))
    }

    /// This error with its cause (which must hold no secret).
    pub fn with_source(self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.with_context(|c| c.source = Some(std::sync::Arc::new(source)))
    }

    /// A no-stock error naming `machine_type` and `location` where it names none (a cloud's answer
    /// to a start or a type change often does not say them); any other error as it is.
    pub fn with_placement(mut self, machine_type: &str, location: &str) -> Self {
        if let Error::NoStock {
            machine_type: t,
            location: l,
            ..
        } = &mut self
        {
            if t.is_empty() {
                *t = machine_type.to_string();
            }
            if l.is_empty() {
                *l = location.to_string();
            }
        }
        self
    }

    /// This error recording that its call was retried `retries` times.
    pub fn with_retries(self, retries: u32) -> Self {
        self.with_context(|c| c.retries = retries)
    }

    /// This error with `change` made to its context, when it carries one.
    fn with_context(mut self, change: impl FnOnce(&mut Context)) -> Self {
        if let Some(c) = self.context_mut() {
            change(c);
        }
        self
    }

    /// The same error with `prefix: ` before its message (what a caller was doing when it failed),
    /// keeping its kind and context.
    pub fn prefixed(mut self, prefix: &str) -> Self {
        match &mut self {
            Error::NotFound { what: m, .. }
            | Error::AlreadyExists { what: m, .. }
            | Error::NoStock { message: m, .. }
            | Error::Quota { message: m, .. }
            | Error::Throttled { message: m, .. }
            | Error::Busy { message: m, .. }
            | Error::Unauthenticated { message: m, .. }
            | Error::PermissionDenied { message: m, .. }
            | Error::Transient { message: m, .. }
            | Error::Other { message: m, .. }
            | Error::InvalidSettings { message: m, .. }
            | Error::InvalidSpec { rule: m, .. } => *m = format!("{prefix}: {m}"),
            Error::Leftovers { error, .. } => {
                let inner = std::mem::replace(&mut **error, Error::other(""));
                **error = inner.prefixed(prefix);
            }
            Error::NotOwned { .. } | Error::Unsupported { .. } => {}
        }
        self
    }

    /// The meaning of a bare HTTP status, for a driver's error mapping to fall back on once it has
    /// looked at its cloud's own codes: 401 unauthenticated, 403 permission denied, 404 not found,
    /// 409 already exists, 423 busy, 408 and 5xx transient, 429 throttled (with `retry_after`), else
    /// other.
    pub fn from_http_status(
        status: u16,
        message: impl Into<String>,
        retry_after: Option<Duration>,
    ) -> Self {
        let message = message.into();
        match status {
            401 => Error::unauthenticated(message),
            403 => Error::permission_denied(message),
            404 => Error::not_found(message),
            409 => Error::already_exists(message),
            423 => Error::busy(message),
            429 => Error::throttled(retry_after, message),
            408 | 500..=599 => Error::transient(message),
            _ => Error::other(format!("HTTP {status}: {message}")),
        }
    }

    /// An error of `kind` with a generic message: what fault injection and tests use.
    pub fn of_kind(kind: ErrorKind, message: impl Into<String>) -> Self {
        let message = message.into();
        match kind {
            ErrorKind::InvalidSpec => Error::invalid("spec", message),
            ErrorKind::InvalidSettings => Error::settings(Vec::<String>::new(), message),
            ErrorKind::NotFound => Error::not_found(message),
            ErrorKind::AlreadyExists => Error::already_exists(message),
            ErrorKind::NotOwned => Error::not_owned(message, ""),
            ErrorKind::NoStock => Error::no_stock("", "", message),
            ErrorKind::Quota => Error::quota(message),
            ErrorKind::Throttled => Error::throttled(None, message),
            ErrorKind::Busy => Error::busy(message),
            ErrorKind::Unauthenticated => Error::unauthenticated(message),
            ErrorKind::PermissionDenied => Error::permission_denied(message),
            ErrorKind::Unsupported => Error::unsupported("provider", message),
            ErrorKind::Transient => Error::transient(message),
            ErrorKind::Leftovers => Error::leftovers(Error::other(message), Vec::new()),
            ErrorKind::Other => Error::other(message),
        }
    }
}

/// Parses a `Retry-After` header in its delta-seconds form (`"3"`, `"1.5"`); `None` for anything else
/// (an HTTP date is rare from cloud APIs and is treated as absent: the policy's own backoff applies).
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let secs: f64 = value.trim().parse().ok()?;
    (secs.is_finite() && (0.0..86_400.0).contains(&secs)).then(|| Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed_once_and_made_as_itself() {
        let distinct: std::collections::HashSet<_> = ErrorKind::ALL.iter().collect();
        assert_eq!(distinct.len(), ErrorKind::ALL.len());
        for k in ErrorKind::ALL {
            assert_eq!(Error::of_kind(k, "m").kind(), k);
        }
    }

    #[test]
    fn replace_context_replaces_the_context_of_a_kind_that_has_one() {
        let mut c = Context::new();
        c.retries = 4;
        c.left = vec!["disk d".into()];
        let e = Error::quota("cores").replace_context(c.clone());
        assert_eq!(e.retries(), 4);
        assert_eq!(e.left(), ["disk d".to_string()]);
        let before = Error::invalid("name", "rule");
        assert_eq!(
            before.clone().replace_context(c),
            before,
            "no context to replace"
        );
    }

    #[test]
    fn http_status_meaning() {
        assert_eq!(
            Error::from_http_status(503, "x", None).kind(),
            ErrorKind::Transient
        );
        assert_eq!(
            Error::from_http_status(401, "x", None).kind(),
            ErrorKind::Unauthenticated
        );
        let t = Error::from_http_status(429, "x", parse_retry_after("2"));
        assert_eq!(t.retry_after(), Some(Duration::from_secs(2)));
        assert_eq!(
            Error::from_http_status(418, "tea", None).to_string(),
            "HTTP 418: tea"
        );
        let b = Error::from_http_status(423, "locked", None);
        assert_eq!(b.kind(), ErrorKind::Busy);
        assert!(b.is_retryable() && b.made_nothing());
        assert_eq!(b.to_string(), "busy with another operation: locked");
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("-1"), None);
    }

    #[test]
    fn retry_meaning() {
        assert!(Error::transient("x").is_retryable());
        let t = Error::throttled(Some(Duration::from_secs(3)), "slow down");
        assert!(t.is_retryable());
        assert_eq!(t.retry_after(), Some(Duration::from_secs(3)));
        assert!(t.to_string().contains("3000 ms"));
        for k in [
            ErrorKind::NoStock,
            ErrorKind::Quota,
            ErrorKind::InvalidSpec,
            ErrorKind::NotOwned,
        ] {
            assert!(!Error::of_kind(k, "m").is_retryable(), "{k:?}");
            assert_eq!(Error::of_kind(k, "m").kind(), k);
        }
    }

    #[test]
    fn settings_error_names_every_key() {
        let e = Error::settings(["A_TOKEN", "B_REGION"], "missing");
        assert_eq!(
            e.to_string(),
            "invalid settings (A_TOKEN, B_REGION): missing"
        );
    }

    #[test]
    fn leftovers_name_what_remains() {
        let e = Error::leftovers(
            Error::transient("vm create failed"),
            vec!["disk d1".into(), "address a1".into()],
        );
        assert_eq!(
            e.to_string(),
            "transient failure: vm create failed; could not remove: disk d1, address a1"
        );
    }

    #[test]
    fn with_leftovers_keeps_no_stock_and_quota_and_names_what_remains() {
        let left = || vec!["server 7 (s1)".to_string()];
        let e = Error::no_stock("cx23", "fsn1", "no room")
            .with_code("resource_unavailable")
            .with_leftovers(left());
        assert_eq!(e.kind(), ErrorKind::NoStock);
        assert_eq!(e.code(), Some("resource_unavailable"));
        assert!(
            e.to_string()
                .contains("no room; the clean-up could not remove: server 7 (s1)"),
            "{e}"
        );
        let e = Error::quota("cores").with_leftovers(left());
        assert_eq!(e.kind(), ErrorKind::Quota);
        assert!(
            e.to_string()
                .contains("cores; the clean-up could not remove: server 7 (s1)"),
            "{e}"
        );
        let e = Error::transient("boom").with_leftovers(left());
        assert!(
            matches!(&e, Error::Leftovers { error, left } if error.kind() == ErrorKind::Transient && left.len() == 1),
            "{e:?}"
        );
        assert_eq!(e.left(), left().as_slice());
        let e = Error::transient("boom").with_leftovers(Vec::new());
        assert_eq!(e.kind(), ErrorKind::Transient);
    }

    /// A create whose clean-up left something made something: a caller that gives the name up on
    /// `made_nothing` would forget what still stands (a disk its listing never shows).
    #[test]
    fn no_stock_or_quota_with_leftovers_never_made_nothing() {
        let left = || vec!["disk d1".to_string()];
        let no_stock = Error::no_stock("e2-small", "zone-a", "no room");
        assert!(no_stock.made_nothing());
        assert!(!no_stock.with_leftovers(left()).made_nothing());
        assert!(!Error::quota("cores").with_leftovers(left()).made_nothing());
        assert!(Error::quota("cores")
            .with_leftovers(Vec::new())
            .made_nothing());
    }

    /// The list stays a list, for a driver to hand on without reading the message.
    #[test]
    fn no_stock_or_quota_with_leftovers_keeps_the_list() {
        let left = || vec!["disk d1".to_string(), "address a1".to_string()];
        let clean = Error::no_stock("e2-small", "zone-a", "no room");
        assert!(clean.left().is_empty());
        let e = clean
            .with_code("ZONE_RESOURCE_POOL_EXHAUSTED")
            .with_leftovers(left());
        assert_eq!(e.left(), left().as_slice());
        assert_eq!(e.code(), Some("ZONE_RESOURCE_POOL_EXHAUSTED"));
        assert!(format!("{e:?}").contains("disk d1"), "{e:?}");
        assert_eq!(
            Error::quota("cores").with_leftovers(left()).left(),
            left().as_slice()
        );
        assert!(Error::transient("boom").left().is_empty());
    }
}

#[cfg(test)]
mod context_tests {
    use super::*;
    use std::error::Error as _;

    #[derive(Debug)]
    struct Cause;
    impl std::fmt::Display for Cause {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("connection reset by peer")
        }
    }
    impl std::error::Error for Cause {}

    #[test]
    fn placement_fills_only_what_no_stock_left_empty() {
        let e = Error::no_stock("", "", "no room").with_placement("cx23", "fsn1");
        assert_eq!(e.to_string(), "no stock of cx23 in fsn1: no room");
        let e = Error::no_stock("cx33", "", "no room").with_placement("cx23", "fsn1");
        assert_eq!(e.to_string(), "no stock of cx33 in fsn1: no room");
        assert_eq!(
            Error::quota("q").with_placement("t", "l"),
            Error::quota("q")
        );
    }

    #[test]
    fn context_keeps_operation_retries_code_and_cause() {
        let e = Error::transient("503 Service Unavailable")
            .with_operation("instances.insert")
            .with_code("serviceUnavailable")
            .with_source(Cause)
            .with_retries(6);
        assert_eq!(e.operation(), Some("instances.insert"));
        assert_eq!(e.retries(), 6);
        assert_eq!(e.code(), Some("serviceUnavailable"));
        assert_eq!(
            e.source().map(|s| s.to_string()).as_deref(),
            Some("connection reset by peer")
        );
        assert_eq!(
            e.to_string(),
            "transient failure: 503 Service Unavailable [instances.insert, after 6 retries]"
        );
        // The first operation named stays: an outer layer does not rename the failed call.
        assert_eq!(
            e.clone().with_operation("create").operation(),
            Some("instances.insert")
        );
    }

    #[test]
    fn made_nothing_is_a_refusal_that_no_attempt_may_have_acted_on() {
        use ErrorKind as K;
        for k in [
            K::InvalidSpec,
            K::InvalidSettings,
            K::NotFound,
            K::AlreadyExists,
            K::NotOwned,
            K::NoStock,
            K::Quota,
            K::Throttled,
            K::Unauthenticated,
            K::PermissionDenied,
            K::Unsupported,
        ] {
            let e = Error::of_kind(k, "m");
            assert!(e.made_nothing() && !e.may_have_acted(), "{k:?}");
            let marked = e.with_may_have_acted();
            assert!(marked.may_have_acted() && !marked.made_nothing(), "{k:?}");
        }
        for k in [K::Transient, K::Other, K::Leftovers] {
            assert!(!Error::of_kind(k, "m").made_nothing(), "{k:?}");
        }
        // An error without a context keeps the mark as Other, with its words and itself as source.
        let e = Error::not_owned("m-1", "stack-a").with_may_have_acted();
        assert_eq!(e.kind(), ErrorKind::Other);
        assert!(e.may_have_acted() && !e.made_nothing());
        assert!(
            e.to_string().starts_with("machine m-1 does not belong"),
            "{e}"
        );
        assert!(e.source().unwrap().to_string().contains("m-1"));
        // The mark is not part of equality (as the cause is not), and shows in Debug.
        let q = Error::quota("cores");
        assert_eq!(q.clone().with_may_have_acted(), q);
        assert!(format!("{:?}", q.with_may_have_acted()).contains("may_have_acted"));
    }

    #[test]
    fn errors_raised_before_any_call_have_no_context() {
        let e = Error::invalid("name", "rule").with_operation("create");
        assert!(e.context().is_none());
        assert_eq!(e.to_string(), "invalid name: rule");
    }

    #[test]
    fn leftovers_source_is_the_first_failure_and_prefixes_keep_the_kind() {
        let e = Error::leftovers(
            Error::quota("cores").with_code("QuotaExceeded"),
            vec!["nic n1".into()],
        );
        assert_eq!(e.code(), Some("QuotaExceeded"));
        assert_eq!(e.source().unwrap().to_string(), "quota exceeded: cores");
        let p = Error::permission_denied("RequestDisallowedByPolicy")
            .prefixed("the group was not made");
        assert_eq!(p.kind(), ErrorKind::PermissionDenied);
        assert_eq!(
            p.to_string(),
            "permission denied: the group was not made: RequestDisallowedByPolicy"
        );
    }
}

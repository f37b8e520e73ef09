//! The native methods of `io.kquota.kafka.NativeEngine`, and nothing else: each one reads its
//! arguments, calls [`crate::callback`] through [`guard`], and answers with a plain value.
//!
//! No panic and no Rust error crosses into the JVM. Every call runs under `catch_unwind`; a failure
//! (a panic, a JNI error, a handle that is not open, the fault drill) is answered with the method's
//! failure value, and its message is kept for the Java half, which logs it at most once a second and
//! answers what the last good configuration answered.
//!
//! The per-request methods (`tags`, `limit`) read Java strings through the raw JNI table
//! (`GetStringLength`, `GetStringRegion`) into per-thread buffers: no allocation, no local reference,
//! and the code units as Java holds them, lone surrogates included. That is the `unsafe` here.
#![allow(unsafe_code)]
// The JVM reaches the exports by their symbol names, not through Rust's module tree.
#![allow(unreachable_pub)]

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use jni_sys::{
    jboolean, jclass, jdouble, jdoubleArray, jint, jintArray, jlong, jobjectArray, jsize, jstring,
    JNIEnv,
};

use crate::callback::{Part, QuotaType, Tags};
use crate::registry::{self, Instance};
use crate::settings::Settings;

/// What went wrong in a call, kept for `NativeEngine.lastError()`.
struct Failure(String);

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure(e.to_string())
    }
}

thread_local! {
    /// The last failure's message on this thread.
    static LAST_ERROR: RefCell<Option<String>> = const { RefCell::new(None) };
    /// Scratch space for two names: code units as read, and the engine names made of them.
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

#[derive(Default)]
struct Scratch {
    units: Vec<u16>,
    first: String,
    second: String,
}

/// Longer names than this (in UTF-16 units) are refused rather than copied: a Kafka principal or
/// client-id is far shorter, and the scratch buffers stay bounded.
const MAX_NAME_UNITS: jsize = 1 << 16;

/// Runs `f` with panics caught; on any failure records its message and answers `failed`.
fn guard<T>(failed: T, f: impl FnOnce() -> Result<T, Failure>) -> T {
    registry::quiet_panics();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(Failure(message))) => {
            set_error(message);
            failed
        }
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic with no message".to_owned());
            set_error(format!("the engine panicked: {message}"));
            failed
        }
    }
}

fn set_error(message: String) {
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = Some(message));
}

/// The open callback behind `handle`, failing on purpose while its fault drill is on.
fn instance(handle: jlong) -> Result<Arc<Instance>, Failure> {
    let instance =
        registry::get(handle).ok_or_else(|| Failure(format!("no open callback {handle}")))?;
    if instance.failing() {
        // A real panic, so that the drill goes through the same unwinding as a bug would.
        panic!("the fault drill is on (setFailing(true))");
    }
    Ok(instance)
}

/// Calls `f` with the open callback behind `handle`, without cloning its `Arc` (the hot path).
fn with_instance<T>(
    handle: jlong,
    f: impl FnOnce(&Instance) -> Result<T, Failure>,
) -> Result<T, Failure> {
    registry::with(handle, |instance| {
        let instance = instance.ok_or_else(|| Failure(format!("no open callback {handle}")))?;
        if instance.failing() {
            panic!("the fault drill is on (setFailing(true))");
        }
        f(instance)
    })
}

fn quota_type(ordinal: jint) -> Result<QuotaType, Failure> {
    QuotaType::from_ordinal(ordinal)
        .ok_or_else(|| Failure(format!("no quota type with ordinal {ordinal}")))
}

/// Reads the Java string `s` into `units` (a `null` is the empty string).
///
/// # Safety
/// `env` is the calling thread's JNI environment and `s` a live local or global reference (or null).
unsafe fn read_units(env: *mut JNIEnv, s: jstring, units: &mut Vec<u16>) -> Result<(), Failure> {
    units.clear();
    if s.is_null() {
        return Ok(());
    }
    let table = &**env;
    let len = (table.v1_1.GetStringLength)(env, s);
    if !(0..=MAX_NAME_UNITS).contains(&len) {
        return Err(Failure(format!(
            "a name of {len} UTF-16 units (at most {MAX_NAME_UNITS})"
        )));
    }
    units.resize(len as usize, 0);
    (table.v1_2.GetStringRegion)(env, s, 0, len, units.as_mut_ptr());
    if (table.v1_2.ExceptionCheck)(env) {
        (table.v1_1.ExceptionClear)(env);
        return Err(Failure("reading a Java string failed".into()));
    }
    Ok(())
}

/// Reads two Java strings as engine names and calls `f` with them.
///
/// # Safety
/// As [`read_units`], for both strings.
unsafe fn with_names<T>(
    env: *mut JNIEnv,
    first: jstring,
    second: jstring,
    f: impl FnOnce(&str, &str) -> Result<T, Failure>,
) -> Result<T, Failure> {
    SCRATCH.with(|scratch| {
        let scratch = &mut *scratch.borrow_mut();
        read_units(env, first, &mut scratch.units)?;
        scratch.first.clear();
        crate::names::push_java(&scratch.units, &mut scratch.first);
        read_units(env, second, &mut scratch.units)?;
        scratch.second.clear();
        crate::names::push_java(&scratch.units, &mut scratch.second);
        // Bounded: a long name's buffers are not kept for the thread's life.
        let result = f(&scratch.first, &scratch.second);
        if scratch.units.capacity() > 4096 {
            *scratch = Scratch::default();
        }
        result
    })
}

/// Reads one Java string as a Rust `String` of its engine name.
///
/// # Safety
/// As [`read_units`].
unsafe fn name(env: *mut JNIEnv, s: jstring) -> Result<String, Failure> {
    let mut units = Vec::new();
    read_units(env, s, &mut units)?;
    Ok(crate::names::from_java(&units))
}

/// A new Java string holding `text`, or null.
///
/// # Safety
/// `env` is the calling thread's JNI environment.
unsafe fn new_string(env: *mut JNIEnv, text: &str) -> jstring {
    let units: Vec<u16> = text.encode_utf16().collect();
    let table = &**env;
    let s = (table.v1_1.NewString)(env, units.as_ptr(), units.len() as jsize);
    if (table.v1_2.ExceptionCheck)(env) {
        (table.v1_1.ExceptionClear)(env);
        return std::ptr::null_mut();
    }
    s
}

/// Reads element `i` of a `String[]` as a plain Rust string (lone surrogates replaced).
///
/// # Safety
/// `env` is the calling thread's JNI environment and `array` a live `String[]`.
unsafe fn element(env: *mut JNIEnv, array: jobjectArray, i: jsize) -> Result<String, Failure> {
    let table = &**env;
    let s = (table.v1_1.GetObjectArrayElement)(env, array, i);
    if (table.v1_2.ExceptionCheck)(env) {
        (table.v1_1.ExceptionClear)(env);
        return Err(Failure(format!("reading setting {i} failed")));
    }
    let mut units = Vec::new();
    let read = read_units(env, s, &mut units);
    (table.v1_1.DeleteLocalRef)(env, s);
    read?;
    Ok(String::from_utf16_lossy(&units))
}

/// `long open(String[] keys, String[] values, int nodeId, String[] error)`: a new callback from
/// the `kquota.*` settings for the broker `nodeId`, or 0 with the refusal in `error[0]`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_kquota_kafka_NativeEngine_open(
    env: *mut JNIEnv,
    _class: jclass,
    keys: jobjectArray,
    values: jobjectArray,
    node_id: jint,
    error: jobjectArray,
) -> jlong {
    guard(0, || unsafe {
        let table = &**env;
        let n = (table.v1_1.GetArrayLength)(env, keys);
        if n != (table.v1_1.GetArrayLength)(env, values) {
            return Err(Failure("keys and values differ in length".into()));
        }
        let mut pairs = Vec::with_capacity(n.max(0) as usize);
        for i in 0..n {
            pairs.push((element(env, keys, i)?, element(env, values, i)?));
        }
        match Settings::parse(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
            Ok(settings) => Ok(registry::open(settings, node_id)?),
            Err(refused) => {
                let message = new_string(env, &refused.to_string());
                (table.v1_1.SetObjectArrayElement)(env, error, 0, message);
                Ok(0)
            }
        }
    })
}

/// `void close(long handle)`: the callback is closed; later calls with its handle fail.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_kquota_kafka_NativeEngine_close(
    _env: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
) {
    guard((), || {
        registry::close(handle);
        Ok(())
    })
}

/// `String lastError()`: this thread's last failure, or null.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_kquota_kafka_NativeEngine_lastError(
    env: *mut JNIEnv,
    _class: jclass,
) -> jstring {
    guard(std::ptr::null_mut(), || {
        let message = LAST_ERROR.with(|e| e.borrow_mut().take());
        Ok(match message {
            Some(m) => unsafe { new_string(env, &m) },
            None => std::ptr::null_mut(),
        })
    })
}

/// `int cacheEntries(long handle)`: the memo size of the settings, or -1.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_kquota_kafka_NativeEngine_cacheEntries(
    _env: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
) -> jint {
    guard(-1, || {
        Ok(instance(handle)?.settings().cache_entries() as jint)
    })
}

/// `String policy(long handle)`: `kafka` or `kip55`, or null.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_kquota_kafka_NativeEngine_policy(
    env: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
) -> jstring {
    guard(std::ptr::null_mut(), || {
        let policy = instance(handle)?.callback().policy().to_string();
        Ok(unsafe { new_string(env, &policy) })
    })
}

/// `long entities(long handle)`: configured entities, or -1.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_kquota_kafka_NativeEngine_entities(
    _env: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
) -> jlong {
    guard(-1, || {
        Ok(instance(handle)?.callback().engine().entity_count() as jlong)
    })
}

/// `int mask(long handle, int type)`: the type's shape bits, or -1.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_kquota_kafka_NativeEngine_mask(
    _env: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
    ty: jint,
) -> jint {
    guard(-1, || {
        Ok(instance(handle)?.callback().mask(quota_type(ty)?) as jint)
    })
}

/// `void setFailing(long handle, boolean failing)`: the fault drill on or off.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_kquota_kafka_NativeEngine_setFailing(
    _env: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
    failing: jboolean,
) {
    guard((), || {
        let instance =
            registry::get(handle).ok_or_else(|| Failure(format!("no open callback {handle}")))?;
        instance.set_failing(failing);
        Ok(())
    })
}

/// An entity component from its kind (0 absent, 1 named, 2 default) and name.
fn part(kind: jint, name: &str) -> Result<Part<'_>, Failure> {
    match kind {
        0 => Ok(Part::Absent),
        1 => Ok(Part::Named(name)),
        2 => Ok(Part::Default),
        _ => Err(Failure(format!("no entity component kind {kind}"))),
    }
}

/// `int update(long handle, int type, int userKind, String user, int clientKind, String client,
/// double value)`: the type's new shape bits; -1 on a failure, -2 if the engine refused the change
/// (both with `lastError()`).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_io_kquota_kafka_NativeEngine_update(
    env: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
    ty: jint,
    user_kind: jint,
    user: jstring,
    client_kind: jint,
    client: jstring,
    value: jdouble,
) -> jint {
    change(
        env,
        handle,
        ty,
        user_kind,
        user,
        client_kind,
        client,
        Some(value),
    )
}

/// `int remove(long handle, int type, int userKind, String user, int clientKind, String client)`:
/// as `update`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_io_kquota_kafka_NativeEngine_remove(
    env: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
    ty: jint,
    user_kind: jint,
    user: jstring,
    client_kind: jint,
    client: jstring,
) -> jint {
    change(env, handle, ty, user_kind, user, client_kind, client, None)
}

#[allow(clippy::too_many_arguments)]
fn change(
    env: *mut JNIEnv,
    handle: jlong,
    ty: jint,
    user_kind: jint,
    user: jstring,
    client_kind: jint,
    client: jstring,
    value: Option<f64>,
) -> jint {
    let refused = std::cell::Cell::new(false);
    let answer = guard(-1, || {
        let instance = instance(handle)?;
        let ty = quota_type(ty)?;
        let (user, client) = unsafe { (name(env, user)?, name(env, client)?) };
        let (user, client) = (part(user_kind, &user)?, part(client_kind, &client)?);
        let cb = instance.callback();
        let result = match value {
            Some(v) => cb.update(ty, user, client, v),
            None => cb.remove(ty, user, client),
        };
        result.map(|mask| mask as jint).map_err(|message| {
            refused.set(true);
            Failure(message)
        })
    });
    if answer == -1 && refused.get() {
        -2
    } else {
        answer
    }
}

/// `int tags(long handle, int type, String sanitizedUser, String clientId)`: 0 for
/// `{user, client-id}`, 1 for `{user, ""}`, 2 for `{"", client-id}`; -1 on a failure.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_kquota_kafka_NativeEngine_tags(
    env: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
    ty: jint,
    user: jstring,
    client: jstring,
) -> jint {
    guard(-1, || {
        with_instance(handle, |instance| {
            let ty = quota_type(ty)?;
            let tags: Tags = unsafe {
                with_names(env, user, client, |u, c| {
                    Ok(instance.callback().tags(ty, u, c))
                })?
            };
            Ok(tags as jint)
        })
    })
}

/// "No quota", as `limit` answers it: no limit Kafka stores is at or below 0.
const NO_QUOTA: jdouble = -1.0;
/// A failure, as `limit` answers it.
const LIMIT_FAILED: jdouble = -2.0;

/// `double limit(long handle, int type, String userTag, String clientTag)`: the bucket's limit,
/// -1 for none, -2 on a failure.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_kquota_kafka_NativeEngine_limit(
    env: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
    ty: jint,
    user_tag: jstring,
    client_tag: jstring,
) -> jdouble {
    guard(LIMIT_FAILED, || {
        with_instance(handle, |instance| {
            let ty = quota_type(ty)?;
            let limit = unsafe {
                with_names(env, user_tag, client_tag, |u, c| {
                    Ok(instance.callback().limit(ty, u, c))
                })?
            };
            Ok(limit.unwrap_or(NO_QUOTA))
        })
    })
}

/// `String explain(long handle, String sanitizedUser, String clientId)`: why each type's limit is
/// what it is, or null on a failure.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_kquota_kafka_NativeEngine_explain(
    env: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
    user: jstring,
    client: jstring,
) -> jstring {
    guard(std::ptr::null_mut(), || {
        let instance = instance(handle)?;
        let text = unsafe {
            with_names(env, user, client, |u, c| {
                Ok(instance.callback().explain(u, c))
            })?
        };
        Ok(unsafe { new_string(env, &text) })
    })
}

/// `int usageIntervalMs(long handle)`: how often the Java half hands over the sensors' readings,
/// 0 when the cluster is off, -1 on a failure.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_kquota_kafka_NativeEngine_usageIntervalMs(
    _env: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
) -> jint {
    guard(-1, || {
        let instance = instance(handle)?;
        #[cfg(feature = "cluster")]
        if let Some(link) = instance.link() {
            return Ok(link.interval().as_millis().clamp(1, i32::MAX as u128) as jint);
        }
        let _ = instance;
        Ok(0)
    })
}

/// `String clusterState(long handle)`: `off`, `joining`, `ready` or `stopped: why`; null on a
/// failure.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_kquota_kafka_NativeEngine_clusterState(
    env: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
) -> jstring {
    guard(std::ptr::null_mut(), || {
        let instance = instance(handle)?;
        #[cfg(feature = "cluster")]
        let state = instance
            .link()
            .map_or_else(|| "off".to_owned(), |l| l.state());
        #[cfg(not(feature = "cluster"))]
        let state = {
            let _ = instance;
            "off".to_owned()
        };
        Ok(unsafe { new_string(env, &state) })
    })
}

/// `int liveInstances(long handle)`: the live brokers the membership knows (1 when the cluster is
/// off or not joined yet), -1 on a failure.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_kquota_kafka_NativeEngine_liveInstances(
    _env: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
) -> jint {
    guard(-1, || {
        let instance = instance(handle)?;
        #[cfg(feature = "cluster")]
        if let Some(link) = instance.link() {
            return Ok(link.live().min(i32::MAX as u32) as jint);
        }
        let _ = instance;
        Ok(1)
    })
}

/// `int leadership(long handle, int led, int total)`: this broker leads `led` of `total`
/// partitions; 1 if that moves a `bps` part (Kafka should read the limits again), 0 if not, -1 on
/// a failure.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_kquota_kafka_NativeEngine_leadership(
    _env: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
    led: jint,
    total: jint,
) -> jint {
    guard(-1, || {
        let (Ok(led), Ok(total)) = (u32::try_from(led), u32::try_from(total)) else {
            return Err(Failure(format!("leadership {led} of {total}")));
        };
        with_instance(handle, |instance| {
            let callback = instance.callback();
            #[cfg(feature = "cluster")]
            let changed = match instance.link() {
                Some(link) => link.set_leadership(led, total),
                None => callback.parts().set_leadership(led, total),
            };
            #[cfg(not(feature = "cluster"))]
            let changed = callback.parts().set_leadership(led, total);
            // Only a configured cluster-wide limit has a part that moves with it.
            let any_bps = [QuotaType::Produce, QuotaType::Fetch]
                .iter()
                .any(|t| t.bps_key().is_some_and(|k| callback.configures(k)));
            Ok(jint::from(changed && any_bps))
        })
    })
}

/// `int tick(long handle, int[] types, String[] users, String[] clients, double[] rates, int
/// count)`: the quota sensors' `byte-rate` readings, `count` of them (type ordinals, the `user` and
/// `client-id` tags, bytes/s); answers the bits of `cluster::tick` (1: the configuration changed,
/// 2: limits moved), -1 on a failure. At most a million readings are read.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_kquota_kafka_NativeEngine_tick(
    env: *mut JNIEnv,
    _class: jclass,
    handle: jlong,
    types: jintArray,
    users: jobjectArray,
    clients: jobjectArray,
    rates: jdoubleArray,
    count: jint,
) -> jint {
    guard(-1, || {
        let instance = instance(handle)?;
        #[cfg(feature = "cluster")]
        if let Some(link) = instance.link() {
            let readings = unsafe { readings(env, types, users, clients, rates, count)? };
            return Ok(link.tick(instance.callback(), &readings));
        }
        let _ = (env, instance, types, users, clients, rates, count);
        Ok(0)
    })
}

/// The most sensor readings one tick reads (the Java half's reporter holds at most a million).
#[cfg(feature = "cluster")]
pub const MAX_READINGS: jint = 1_000_000;

/// Reads a tick's parallel arrays.
///
/// # Safety
/// `env` is the calling thread's JNI environment and the arrays live local references.
#[cfg(feature = "cluster")]
unsafe fn readings(
    env: *mut JNIEnv,
    types: jintArray,
    users: jobjectArray,
    clients: jobjectArray,
    rates: jdoubleArray,
    count: jint,
) -> Result<Vec<crate::usage::Reading>, Failure> {
    let table = &**env;
    let n = count.clamp(0, MAX_READINGS);
    for array in [types as jobjectArray, users, clients, rates as jobjectArray] {
        if array.is_null() || (table.v1_1.GetArrayLength)(env, array) < n {
            return Err(Failure(format!(
                "tick: an array shorter than its count {n}"
            )));
        }
    }
    let mut ordinals = vec![0 as jint; n as usize];
    let mut values = vec![0.0 as jdouble; n as usize];
    (table.v1_1.GetIntArrayRegion)(env, types, 0, n, ordinals.as_mut_ptr());
    (table.v1_1.GetDoubleArrayRegion)(env, rates, 0, n, values.as_mut_ptr());
    if (table.v1_2.ExceptionCheck)(env) {
        (table.v1_1.ExceptionClear)(env);
        return Err(Failure("tick: reading the arrays failed".into()));
    }
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..n {
        let Some(ty) = QuotaType::from_ordinal(ordinals[i as usize]) else {
            continue;
        };
        out.push(crate::usage::Reading {
            ty,
            user: name_element(env, users, i)?,
            client: name_element(env, clients, i)?,
            rate: values[i as usize],
        });
    }
    Ok(out)
}

/// Element `i` of a `String[]` as an engine name (one for one, lone surrogates included).
///
/// # Safety
/// As [`element`].
#[cfg(feature = "cluster")]
unsafe fn name_element(env: *mut JNIEnv, array: jobjectArray, i: jsize) -> Result<String, Failure> {
    let table = &**env;
    let s = (table.v1_1.GetObjectArrayElement)(env, array, i);
    if (table.v1_2.ExceptionCheck)(env) {
        (table.v1_1.ExceptionClear)(env);
        return Err(Failure(format!("tick: reading name {i} failed")));
    }
    let read = name(env, s);
    (table.v1_1.DeleteLocalRef)(env, s);
    read
}

/// `String[] drainLog()`: the plug-in's threads' log lines since the last call, each
/// `LEVEL message` (ERROR, WARN or INFO); an empty array when there are none, null on a failure.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_kquota_kafka_NativeEngine_drainLog(
    env: *mut JNIEnv,
    class: jclass,
) -> jobjectArray {
    guard(std::ptr::null_mut(), || {
        #[cfg(feature = "cluster")]
        let lines: Vec<String> = crate::log::drain()
            .into_iter()
            .map(|(level, message)| format!("{} {message}", level.as_str()))
            .collect();
        #[cfg(not(feature = "cluster"))]
        let lines: Vec<String> = Vec::new();
        unsafe { string_array(env, class, &lines) }
    })
}

/// A new `String[]` of `lines`.
///
/// # Safety
/// `env` is the calling thread's JNI environment.
unsafe fn string_array(
    env: *mut JNIEnv,
    _class: jclass,
    lines: &[String],
) -> Result<jobjectArray, Failure> {
    let table = &**env;
    let string_class = (table.v1_1.FindClass)(env, c"java/lang/String".as_ptr());
    if string_class.is_null() || (table.v1_2.ExceptionCheck)(env) {
        (table.v1_1.ExceptionClear)(env);
        return Err(Failure("no java.lang.String class".into()));
    }
    let array = (table.v1_1.NewObjectArray)(
        env,
        lines.len() as jsize,
        string_class,
        std::ptr::null_mut(),
    );
    (table.v1_1.DeleteLocalRef)(env, string_class);
    if array.is_null() || (table.v1_2.ExceptionCheck)(env) {
        (table.v1_1.ExceptionClear)(env);
        return Err(Failure("could not make a String[]".into()));
    }
    for (i, line) in lines.iter().enumerate() {
        let s = new_string(env, line);
        (table.v1_1.SetObjectArrayElement)(env, array, i as jsize, s);
        (table.v1_1.DeleteLocalRef)(env, s);
    }
    Ok(array)
}

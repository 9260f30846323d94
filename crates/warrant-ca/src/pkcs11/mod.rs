//! CA keys that live in a PKCS#11 token and never leave it (cryptoki).
//!
//! One [`Module`] per loaded library holds the `C_Initialize`d context and a
//! generation number. Each [`Pkcs11Key`] keeps a pool of logged-in
//! sessions, so signing runs on many threads at once (a PKCS#11 session is
//! used by one thread at a time). When any call fails, the key drops every
//! session of that generation, the module is finalized and initialized
//! again on the next use, and the call is retried once: a token that went
//! away and came back is found again without a restart. A refused PIN is
//! not retried (tokens lock after a few wrong PINs): the key stays refused
//! until the process restarts with the right one.
//!
//! ECDSA in a token signs a digest (`CKM_ECDSA`); the digest is computed
//! here, SHA-256 for P-256 keys and SHA-384 for P-384, and the token's
//! fixed-size `r ‖ s` is returned as is.

pub mod uri;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use cryptoki::context::{CInitializeArgs, CInitializeFlags, Pkcs11};
use cryptoki::error::{Error as CkError, RvError};
use cryptoki::mechanism::Mechanism;
use cryptoki::object::{Attribute, AttributeType, KeyType as CkKeyType, ObjectClass, ObjectHandle};
use cryptoki::session::{Session, UserType};
use cryptoki::slot::Slot;
use cryptoki::types::AuthPin;
use zeroize::Zeroizing;

use crate::derw;
use crate::error::{CaError, Result};
use crate::keys::PublicKeyKind;
use crate::oids;
pub use uri::Pkcs11Uri;

/// Sessions a key keeps open between signatures; more are opened while
/// more threads sign at once, and closed again when they come back.
const MAX_IDLE_SESSIONS: usize = 32;

/// Where the PIN and, when a URI names none, the module come from. Built by
/// the caller from its own configuration (an env var or a file), never from
/// the URI's text.
#[derive(Clone, Default)]
pub struct Pkcs11Access {
    pub pin: Option<Zeroizing<String>>,
    pub default_module: Option<PathBuf>,
}

impl std::fmt::Debug for Pkcs11Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pkcs11Access")
            .field("pin", &self.pin.as_ref().map(|_| "<set>"))
            .field("default_module", &self.default_module)
            .finish()
    }
}

impl Pkcs11Access {
    /// The PIN for `uri`: its `pin-source` file if it names one, else ours.
    fn pin_for(&self, uri: &Pkcs11Uri) -> Result<Zeroizing<String>> {
        if let Some(file) = &uri.pin_source {
            let text =
                Zeroizing::new(std::fs::read_to_string(file).map_err(|e| CaError::io(file, e))?);
            return Ok(Zeroizing::new(
                text.trim_end_matches(['\r', '\n']).to_string(),
            ));
        }
        self.pin.clone().ok_or_else(|| CaError::KeyUnavailable {
            key: uri.to_string(),
            reason: "no PIN given (set keys.pkcs11_pin_env or keys.pkcs11_pin_file)".into(),
        })
    }

    fn module_for(&self, uri: &Pkcs11Uri) -> Result<PathBuf> {
        uri.module_path
            .clone()
            .or_else(|| self.default_module.clone())
            .ok_or_else(|| CaError::KeyUnavailable {
                key: uri.to_string(),
                reason: "no PKCS#11 module (module-path in the URI, or keys.pkcs11_module)".into(),
            })
    }
}

/// A loaded PKCS#11 library and its initialized context.
///
/// Every call into the library runs under the read half of `state`
/// ([`Module::with`]); finalizing takes the write half, so it waits for the
/// calls in flight and none starts against a finalized library.
struct Module {
    path: PathBuf,
    state: RwLock<ModuleState>,
}

struct ModuleState {
    ctx: Option<Pkcs11>,
    /// Bumped each time the context is finalized; sessions, slots and
    /// object handles of an older generation are never used again.
    generation: u64,
}

/// Libraries by path: `C_Initialize` is once per process and library, so
/// every key in a library shares its context.
fn module(path: &Path) -> Arc<Module> {
    static MODULES: OnceLock<Mutex<HashMap<PathBuf, Arc<Module>>>> = OnceLock::new();
    let map = MODULES.get_or_init(Default::default);
    let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
    Arc::clone(map.entry(path.to_path_buf()).or_insert_with(|| {
        Arc::new(Module {
            path: path.to_path_buf(),
            state: RwLock::new(ModuleState {
                ctx: None,
                generation: 0,
            }),
        })
    }))
}

impl Module {
    /// Runs `f` with the initialized context and its generation, holding
    /// the read lock for the whole call (the library is initialized first
    /// if it is not). `f` must not call back into this module.
    fn with<R>(&self, f: impl FnOnce(&Pkcs11, u64) -> R) -> std::result::Result<R, String> {
        loop {
            {
                let s = self.state.read().unwrap_or_else(|p| p.into_inner());
                if let Some(ctx) = &s.ctx {
                    return Ok(f(ctx, s.generation));
                }
            }
            let mut s = self.state.write().unwrap_or_else(|p| p.into_inner());
            if s.ctx.is_none() {
                let ctx = Pkcs11::new(&self.path).map_err(|e| {
                    format!("cannot load PKCS#11 module {}: {e}", self.path.display())
                })?;
                match ctx.initialize(CInitializeArgs::new(CInitializeFlags::OS_LOCKING_OK)) {
                    Ok(()) | Err(CkError::Pkcs11(RvError::CryptokiAlreadyInitialized, _)) => {}
                    Err(e) => return Err(format!("C_Initialize: {e}")),
                }
                s.ctx = Some(ctx);
            }
        }
    }

    /// `f` with the context and the one slot whose token `uri` names. A
    /// library lists the tokens it found when it was initialized, so when
    /// none matches, it is initialized afresh once and asked again (a token
    /// made or inserted since).
    fn with_slot<R>(
        &self,
        uri: &Pkcs11Uri,
        f: impl FnOnce(&Pkcs11, u64, Slot) -> R,
    ) -> std::result::Result<R, String> {
        let found = self.with(|ctx, generation| (find_slot(ctx, uri), generation))?;
        let generation = match found {
            (Ok(_), _) => None,
            (Err(_), g) => Some(g),
        };
        if let Some(g) = generation {
            self.reset(g);
        }
        self.with(|ctx, generation| find_slot(ctx, uri).map(|slot| f(ctx, generation, slot)))?
    }

    /// Finalizes the context of `generation` (if it is still the current
    /// one), once no call is in flight, so the next use initializes the
    /// library afresh.
    fn reset(&self, generation: u64) {
        let mut s = self.state.write().unwrap_or_else(|p| p.into_inner());
        if s.generation != generation {
            return;
        }
        if let Some(ctx) = s.ctx.take() {
            let _ = ctx.finalize();
        }
        s.generation += 1;
    }
}

/// What a failed call means for the key.
enum Failure {
    /// The PIN was refused: never retried.
    Pin(String),
    /// Anything else: reset and retry once.
    Other(String),
}

fn failure(what: &str, e: CkError) -> Failure {
    let text = format!("{what}: {e}");
    match e {
        CkError::Pkcs11(
            RvError::PinIncorrect
            | RvError::PinLocked
            | RvError::PinExpired
            | RvError::PinInvalid
            | RvError::PinLenRange,
            _,
        ) => Failure::Pin(text),
        _ => Failure::Other(text),
    }
}

/// A session of one generation, with the key's handle in it.
struct Pooled {
    generation: u64,
    session: Session,
}

/// A private key in a token: signs without ever exporting it.
pub struct Pkcs11Key {
    uri: Pkcs11Uri,
    module: Arc<Module>,
    pin: Zeroizing<String>,
    kind: PublicKeyKind,
    spki_der: Vec<u8>,
    idle: Mutex<Vec<Pooled>>,
    /// Slot and object handle for one generation.
    located: Mutex<Option<(u64, Slot, ObjectHandle)>>,
    pin_refused: Mutex<Option<String>>,
}

impl std::fmt::Debug for Pkcs11Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pkcs11Key")
            .field("uri", &self.uri.to_string())
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl Drop for Pkcs11Key {
    fn drop(&mut self) {
        let idle = std::mem::take(self.idle.get_mut().unwrap_or_else(|p| p.into_inner()));
        // Only sessions of the current generation are closed: an older
        // session's handle number may already belong to a new session.
        let state = self.module.state.read().unwrap_or_else(|p| p.into_inner());
        if state.ctx.is_some() {
            for p in idle {
                if p.generation == state.generation {
                    let _ = p.session.close();
                }
            }
        }
    }
}

impl Pkcs11Key {
    /// The private key `uri` names (by `object` label and/or `id`), which
    /// must be exactly one EC key in exactly one token.
    pub fn open(uri: &Pkcs11Uri, access: &Pkcs11Access) -> Result<Pkcs11Key> {
        if !uri.names_object() {
            return Err(CaError::field(
                uri::URI_FIELD,
                format!("{uri} names a token but no key (add object= or id=)"),
            ));
        }
        let module = module(&access.module_for(uri)?);
        let pin = access.pin_for(uri)?;
        let unavailable = |reason: String| CaError::KeyUnavailable {
            key: uri.to_string(),
            reason,
        };
        let opened = module
            .with_slot(uri, |ctx, generation, slot| {
                let session = open_logged_in(ctx, slot, &pin).map_err(|f| match f {
                    Failure::Pin(r) | Failure::Other(r) => r,
                })?;
                let found = find_private_key(&session, uri)
                    .and_then(|h| public_key_of(&session, uri, h).map(|pk| (h, pk)));
                match found {
                    Ok((handle, (kind, spki))) => {
                        Ok((generation, slot, session, handle, kind, spki))
                    }
                    Err(e) => {
                        let _ = session.close();
                        Err(e)
                    }
                }
            })
            .and_then(|r| r)
            .map_err(unavailable)?;
        let (generation, slot, session, handle, kind, spki_der) = opened;
        Ok(Pkcs11Key {
            uri: uri.clone(),
            module,
            pin,
            kind,
            spki_der,
            idle: Mutex::new(vec![Pooled {
                generation,
                session,
            }]),
            located: Mutex::new(Some((generation, slot, handle))),
            pin_refused: Mutex::new(None),
        })
    }

    /// Generates an EC key pair in the token `token_uri` names, labelled
    /// `label` with a fresh random `CKA_ID`: private, sensitive, never
    /// extractable, signing only. Returns the key and the URI naming it.
    pub fn generate(
        token_uri: &Pkcs11Uri,
        label: &str,
        kind: PublicKeyKind,
        access: &Pkcs11Access,
    ) -> Result<(Pkcs11Key, Pkcs11Uri)> {
        let curve = match kind {
            PublicKeyKind::EcdsaP256 => oids::SECP256R1,
            PublicKeyKind::EcdsaP384 => oids::SECP384R1,
            other => {
                return Err(CaError::internal(format!(
                    "token keys are ECDSA P-256 or P-384, not {other:?}"
                )));
            }
        };
        let module = module(&access.module_for(token_uri)?);
        let pin = access.pin_for(token_uri)?;
        let unavailable = |reason: String| CaError::KeyUnavailable {
            key: token_uri.to_string(),
            reason,
        };
        let mut id = vec![0u8; 16];
        aws_lc_rs::rand::fill(&mut id).map_err(CaError::internal)?;
        let public_template = [
            Attribute::Token(true),
            Attribute::Private(false),
            Attribute::Verify(true),
            Attribute::EcParams(derw::oid_tlv(&curve)),
            Attribute::Label(label.as_bytes().to_vec()),
            Attribute::Id(id.clone()),
        ];
        let private_template = [
            Attribute::Token(true),
            Attribute::Private(true),
            Attribute::Sensitive(true),
            Attribute::Extractable(false),
            Attribute::Sign(true),
            Attribute::Label(label.as_bytes().to_vec()),
            Attribute::Id(id.clone()),
        ];
        module
            .with_slot(token_uri, |ctx, _, slot| {
                let session = ctx
                    .open_rw_session(slot)
                    .map_err(|e| format!("C_OpenSession: {e}"))?;
                login(&session, &pin).map_err(|f| match f {
                    Failure::Pin(r) | Failure::Other(r) => r,
                })?;
                session
                    .generate_key_pair(
                        &Mechanism::EccKeyPairGen,
                        &public_template,
                        &private_template,
                    )
                    .map(drop)
                    .map_err(|e| format!("C_GenerateKeyPair: {e}"))
            })
            .and_then(|r| r)
            .map_err(unavailable)?;
        let key_uri = token_uri.with_object(label, &id);
        Ok((Pkcs11Key::open(&key_uri, access)?, key_uri))
    }

    /// Whether the token `token_uri` names holds a private key labelled
    /// `label`, and if so its URI.
    pub fn find_labelled(
        token_uri: &Pkcs11Uri,
        label: &str,
        access: &Pkcs11Access,
    ) -> Result<Option<Pkcs11Uri>> {
        let module = module(&access.module_for(token_uri)?);
        let pin = access.pin_for(token_uri)?;
        let unavailable = |reason: String| CaError::KeyUnavailable {
            key: token_uri.to_string(),
            reason,
        };
        let wanted = Pkcs11Uri {
            object: Some(label.to_string()),
            id: None,
            ..token_uri.clone()
        };
        module
            .with_slot(token_uri, |ctx, _, slot| {
                let session = ctx
                    .open_ro_session(slot)
                    .map_err(|e| format!("C_OpenSession: {e}"))?;
                login(&session, &pin).map_err(|f| match f {
                    Failure::Pin(r) | Failure::Other(r) => r,
                })?;
                let found = session
                    .find_objects(&private_key_template(&wanted))
                    .map_err(|e| format!("C_FindObjects: {e}"))?;
                match found.as_slice() {
                    [] => Ok(None),
                    [one] => {
                        let attrs = session
                            .get_attributes(*one, &[AttributeType::Id])
                            .map_err(|e| format!("C_GetAttributeValue: {e}"))?;
                        let id = attrs.into_iter().find_map(|a| match a {
                            Attribute::Id(id) => Some(id),
                            _ => None,
                        });
                        Ok(Some(match id {
                            Some(id) if !id.is_empty() => token_uri.with_object(label, &id),
                            _ => wanted.clone(),
                        }))
                    }
                    many => Err(format!(
                        "{} private keys are labelled {label:?}",
                        many.len()
                    )),
                }
            })
            .and_then(|r| r)
            .map_err(unavailable)
    }

    pub fn uri(&self) -> &Pkcs11Uri {
        &self.uri
    }

    pub fn kind(&self) -> PublicKeyKind {
        self.kind
    }

    /// DER SubjectPublicKeyInfo of the key, read from the token.
    pub fn spki_der(&self) -> &[u8] {
        &self.spki_der
    }

    /// The fixed-size ECDSA signature `r ‖ s` over `message`, hashed here
    /// with the key's hash (SHA-256 for P-256, SHA-384 for P-384).
    pub fn sign_fixed(&self, message: &[u8]) -> Result<Vec<u8>> {
        let alg = if self.kind == PublicKeyKind::EcdsaP256 {
            &aws_lc_rs::digest::SHA256
        } else {
            &aws_lc_rs::digest::SHA384
        };
        let digest = aws_lc_rs::digest::digest(alg, message);
        if let Some(reason) = self
            .pin_refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            return Err(self.unavailable(reason));
        }
        match self.try_sign(digest.as_ref()) {
            Ok(sig) => Ok(sig),
            Err((generation, Failure::Pin(r))) => {
                self.forget(generation);
                *self.pin_refused.lock().unwrap_or_else(|p| p.into_inner()) = Some(r.clone());
                Err(self.unavailable(r))
            }
            Err((generation, Failure::Other(_))) => {
                // The token may have gone and come back, or a session
                // broke: start from a fresh context once.
                self.forget(generation);
                self.module.reset(generation);
                self.try_sign(digest.as_ref()).map_err(|(generation, f)| {
                    self.forget(generation);
                    match f {
                        Failure::Pin(r) => {
                            *self.pin_refused.lock().unwrap_or_else(|p| p.into_inner()) =
                                Some(r.clone());
                            self.unavailable(r)
                        }
                        Failure::Other(r) => {
                            self.module.reset(generation);
                            self.unavailable(r)
                        }
                    }
                })
            }
        }
    }

    fn unavailable(&self, reason: String) -> CaError {
        CaError::KeyUnavailable {
            key: self.uri.to_string(),
            reason,
        }
    }

    /// Drops the sessions and handles of `generation`.
    fn forget(&self, generation: u64) {
        let stale: Vec<Pooled> = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            let (stale, keep) = idle.drain(..).partition(|p| p.generation <= generation);
            *idle = keep;
            stale
        };
        // The module is reset right after, which closes them all; they were
        // opened without close-on-drop, so dropping them makes no call.
        drop(stale);
        let mut located = self.located.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(*located, Some((g, _, _)) if g <= generation) {
            *located = None;
        }
    }

    fn try_sign(&self, digest: &[u8]) -> std::result::Result<Vec<u8>, (u64, Failure)> {
        let signed = self.module.with(|ctx, generation| {
            let fail = |f: Failure| (generation, f);
            let (slot, handle) = self.locate(ctx, generation).map_err(fail)?;
            let pooled = {
                let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
                // Sessions of an older generation died with its context;
                // opened without close-on-drop, they are dropped without a
                // call.
                idle.retain(|p| p.generation == generation);
                idle.pop()
            };
            let session = match pooled {
                Some(p) => p.session,
                None => open_logged_in(ctx, slot, &self.pin).map_err(fail)?,
            };
            match session.sign(&Mechanism::Ecdsa, handle, digest) {
                Ok(sig) => {
                    let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
                    if idle.len() < MAX_IDLE_SESSIONS {
                        idle.push(Pooled {
                            generation,
                            session,
                        });
                    } else {
                        drop(idle);
                        let _ = session.close();
                    }
                    Ok(sig)
                }
                // The session is dropped without a call; the reset that
                // follows closes it with the context.
                Err(e) => Err(fail(failure("C_Sign", e))),
            }
        });
        match signed {
            Ok(result) => result,
            Err(reason) => Err((u64::MAX, Failure::Other(reason))),
        }
    }

    /// The slot and the key's handle for `generation`, found once per
    /// generation. Runs inside [`Module::with`].
    fn locate(
        &self,
        ctx: &Pkcs11,
        generation: u64,
    ) -> std::result::Result<(Slot, ObjectHandle), Failure> {
        let mut located = self.located.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((g, slot, handle)) = *located
            && g == generation
        {
            return Ok((slot, handle));
        }
        let slot = find_slot(ctx, &self.uri).map_err(Failure::Other)?;
        let session = open_logged_in(ctx, slot, &self.pin)?;
        let found = find_private_key(&session, &self.uri)
            .and_then(|h| public_key_of(&session, &self.uri, h).map(|pk| (h, pk)));
        let handle = match found {
            Ok((handle, (kind, spki))) if kind == self.kind && spki == self.spki_der => handle,
            Ok(_) => {
                let _ = session.close();
                return Err(Failure::Other(format!(
                    "the key {} now names another public key",
                    self.uri
                )));
            }
            Err(e) => {
                let _ = session.close();
                return Err(Failure::Other(e));
            }
        };
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Pooled {
                generation,
                session,
            });
        *located = Some((generation, slot, handle));
        Ok((slot, handle))
    }
}

fn find_slot(ctx: &Pkcs11, uri: &Pkcs11Uri) -> std::result::Result<Slot, String> {
    let slots = ctx
        .get_slots_with_token()
        .map_err(|e| format!("C_GetSlotList: {e}"))?;
    let mut matching = Vec::new();
    for slot in slots {
        if uri.slot_id.is_some_and(|id| id != slot.id()) {
            continue;
        }
        let info = match ctx.get_token_info(slot) {
            Ok(i) => i,
            Err(_) => continue,
        };
        let fits = |want: &Option<String>, have: &str| {
            want.as_deref().is_none_or(|w| w == have.trim_end())
        };
        if fits(&uri.token, info.label())
            && fits(&uri.manufacturer, info.manufacturer_id())
            && fits(&uri.serial, info.serial_number())
            && fits(&uri.model, info.model())
        {
            matching.push(slot);
        }
    }
    match matching.as_slice() {
        [one] => Ok(*one),
        [] => Err("no token matches the URI (is it present, and is the token label right?)".into()),
        many => Err(format!(
            "{} tokens match the URI; name one with token=, serial= or slot-id=",
            many.len()
        )),
    }
}

fn login(session: &Session, pin: &str) -> std::result::Result<(), Failure> {
    let auth = AuthPin::new(pin.to_string().into());
    match session.login(UserType::User, Some(&auth)) {
        Ok(()) | Err(CkError::Pkcs11(RvError::UserAlreadyLoggedIn, _)) => Ok(()),
        Err(e) => Err(failure("C_Login", e)),
    }
}

/// A read-only session, logged in (login is per token and process, so
/// only the first session of a generation really logs in).
fn open_logged_in(ctx: &Pkcs11, slot: Slot, pin: &str) -> std::result::Result<Session, Failure> {
    let session = ctx
        .open_ro_session_no_drop(slot)
        .map_err(|e| failure("C_OpenSession", e))?;
    if let Err(f) = login(&session, pin) {
        let _ = session.close();
        return Err(f);
    }
    Ok(session)
}

fn private_key_template(uri: &Pkcs11Uri) -> Vec<Attribute> {
    let mut t = vec![
        Attribute::Class(ObjectClass::PRIVATE_KEY),
        Attribute::KeyType(CkKeyType::EC),
    ];
    if let Some(label) = &uri.object {
        t.push(Attribute::Label(label.as_bytes().to_vec()));
    }
    if let Some(id) = &uri.id {
        t.push(Attribute::Id(id.clone()));
    }
    t
}

fn find_private_key(
    session: &Session,
    uri: &Pkcs11Uri,
) -> std::result::Result<ObjectHandle, String> {
    let found = session
        .find_objects(&private_key_template(uri))
        .map_err(|e| format!("C_FindObjects: {e}"))?;
    match found.as_slice() {
        [one] => Ok(*one),
        [] => Err("no EC private key in the token matches the URI's object/id".into()),
        many => Err(format!(
            "{} EC private keys match the URI; name one with object= and id=",
            many.len()
        )),
    }
}

/// The key's curve and SubjectPublicKeyInfo, from the public key object
/// with the same `CKA_ID` (or label), as `C_GenerateKeyPair` leaves it.
fn public_key_of(
    session: &Session,
    uri: &Pkcs11Uri,
    private: ObjectHandle,
) -> std::result::Result<(PublicKeyKind, Vec<u8>), String> {
    let attrs = session
        .get_attributes(private, &[AttributeType::Id, AttributeType::Label])
        .map_err(|e| format!("C_GetAttributeValue: {e}"))?;
    let mut template = vec![
        Attribute::Class(ObjectClass::PUBLIC_KEY),
        Attribute::KeyType(CkKeyType::EC),
    ];
    for a in attrs {
        match a {
            Attribute::Id(id) if !id.is_empty() => template.push(Attribute::Id(id)),
            Attribute::Label(l) if uri.id.is_none() && !l.is_empty() => {
                template.push(Attribute::Label(l))
            }
            _ => {}
        }
    }
    let found = session
        .find_objects(&template)
        .map_err(|e| format!("C_FindObjects: {e}"))?;
    let public = match found.as_slice() {
        [one] => *one,
        [] => {
            return Err(
                "the token holds no public key beside the private key (same CKA_ID)".into(),
            );
        }
        _ => return Err("several public keys share the private key's CKA_ID".into()),
    };
    let attrs = session
        .get_attributes(public, &[AttributeType::EcParams, AttributeType::EcPoint])
        .map_err(|e| format!("C_GetAttributeValue: {e}"))?;
    let (mut params, mut point) = (None, None);
    for a in attrs {
        match a {
            Attribute::EcParams(p) => params = Some(p),
            Attribute::EcPoint(p) => point = Some(p),
            _ => {}
        }
    }
    let (params, point) = params
        .zip(point)
        .ok_or("the public key has no CKA_EC_PARAMS or CKA_EC_POINT")?;
    let (kind, curve, len) = if params == derw::oid_tlv(&oids::SECP256R1) {
        (PublicKeyKind::EcdsaP256, oids::SECP256R1, 65)
    } else if params == derw::oid_tlv(&oids::SECP384R1) {
        (PublicKeyKind::EcdsaP384, oids::SECP384R1, 97)
    } else {
        return Err("the key is not on P-256 or P-384".into());
    };
    // CKA_EC_POINT is the DER OCTET STRING of the point; some tokens give
    // the bare point.
    let raw = if point.len() == len && point[0] == 0x04 {
        point.as_slice()
    } else {
        derw::octet_string_contents(&point).ok_or("CKA_EC_POINT is not an EC point")?
    };
    if raw.len() != len || raw[0] != 0x04 {
        return Err("CKA_EC_POINT is not an uncompressed point".into());
    }
    Ok((kind, crate::keys::ec_spki(&curve, raw)))
}

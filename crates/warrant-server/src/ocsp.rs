//! The OCSP responder service: a delegated responder per CA (the root and
//! every issuing CA), replaced once half its life has passed, and signed
//! answers kept per certificate.
//!
//! A kept answer is served while its status was confirmed less than
//! [`STATUS_FRESHNESS`] ago and no local revocation happened since
//! (`invalidate`); after that the status is read again (one row), and the
//! signed answer is reused if the status is unchanged and the answer is in
//! the first half of its validity, else signed again. So a revocation on any
//! node shows within [`STATUS_FRESHNESS`], and a hot certificate costs one
//! row read per period, not a signature per request. Requests with a nonce
//! or several certificates are signed one by one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use axum::body::Bytes;
use warrant_ca::{
    CertQuery, Hierarchy, IssuingCa, OcspCertStatus, OcspFailure, OcspResponder, OcspTimes,
    RevocationReason, ocsp_failure_response, parse_ocsp_request,
};
use warrant_store::{CertStatus, Store};

use crate::clock::from_unix;
use crate::config::OcspConfig;

/// How old a status may be before it is read again.
pub const STATUS_FRESHNESS: Duration = Duration::from_millis(500);

/// Kept answers at most; the map is emptied when it is full.
const MAX_KEPT: usize = 100_000;

/// What the HTTP handler sends.
#[derive(Debug, Clone)]
pub struct OcspAnswer {
    /// A DER `OCSPResponse` (successful or not).
    pub der: Bytes,
    /// Seconds a cache may keep it (successful answers only).
    pub max_age: Option<u64>,
}

impl OcspAnswer {
    pub fn failure(status: OcspFailure) -> Self {
        OcspAnswer {
            der: Bytes::from(ocsp_failure_response(status)),
            max_age: None,
        }
    }
}

struct Slot {
    ca: Arc<IssuingCa>,
    /// The root answers for the issuing CAs' certificates, not from the
    /// database.
    issued_ca_serials: Option<Vec<Vec<u8>>>,
    responder: RwLock<Arc<OcspResponder>>,
    replacing: Mutex<()>,
}

/// (slot, serial magnitude).
type KeptKey = (usize, Vec<u8>);

struct Kept {
    der: Bytes,
    status: OcspCertStatus,
    next_update: SystemTime,
    generation: u64,
    /// Milliseconds since the service started when the status was last
    /// read.
    checked_ms: AtomicU64,
}

pub struct OcspService {
    slots: Vec<Slot>,
    kept: RwLock<HashMap<KeptKey, Arc<Kept>>>,
    /// Moves on every local revocation and every responder replacement:
    /// kept answers of an older generation are not served.
    generation: AtomicU64,
    started: Instant,
    validity: Duration,
    lifetime: Duration,
}

impl std::fmt::Debug for OcspService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OcspService")
            .field("cas", &self.slots.len())
            .finish_non_exhaustive()
    }
}

impl OcspService {
    /// A responder for every issuing CA, and for the root unless it is
    /// offline.
    pub fn new(hierarchy: &Hierarchy, cfg: &OcspConfig) -> warrant_ca::Result<Self> {
        let lifetime = cfg.responder_lifetime.0;
        let now = SystemTime::now();
        let mut slots = Vec::new();
        let issued: Vec<Vec<u8>> = hierarchy
            .issuing_cas()
            .map(|ca| ca.serial().to_vec())
            .collect();
        // An offline root cannot sign its responder's certificate here: its
        // issuing CAs' status is its CRL, signed on the offline machine.
        let root = hierarchy.root();
        if !hierarchy.root_is_offline() {
            slots.push(Slot::new(root.clone(), Some(issued), now, lifetime)?);
        }
        for ca in hierarchy.issuing_cas() {
            slots.push(Slot::new(ca.clone(), None, now, lifetime)?);
        }
        Ok(OcspService {
            slots,
            kept: RwLock::new(HashMap::new()),
            generation: AtomicU64::new(0),
            started: Instant::now(),
            validity: cfg.response_validity.0,
            lifetime,
        })
    }

    /// A certificate was revoked here: no kept answer is served again
    /// without reading its status.
    pub fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The answer to the DER `OCSPRequest` `request`.
    pub async fn answer(&self, store: &Store, request: &[u8]) -> OcspAnswer {
        let parsed = match parse_ocsp_request(request) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, "malformed OCSP request");
                return OcspAnswer::failure(OcspFailure::MalformedRequest);
            }
        };
        let now = SystemTime::now();
        // One responder signs a response: every certificate asked about
        // must be of the same CA, and of one of ours.
        let mut slot_index = None;
        for q in &parsed.queries {
            let found = self
                .slots
                .iter()
                .enumerate()
                .find(|(_, s)| current(&s.responder).answers_for(q))
                .map(|(i, _)| i);
            match (found, slot_index) {
                (None, _) => return OcspAnswer::failure(OcspFailure::Unauthorized),
                (Some(i), Some(j)) if i != j => {
                    return OcspAnswer::failure(OcspFailure::Unauthorized);
                }
                (Some(i), _) => slot_index = Some(i),
            }
        }
        let Some(i) = slot_index else {
            return OcspAnswer::failure(OcspFailure::MalformedRequest);
        };
        let responder = match self.responder(i, now) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, ca = self.slots[i].ca.name(), "OCSP responder replacement failed");
                return OcspAnswer::failure(OcspFailure::InternalError);
            }
        };
        let result = if parsed.queries.len() == 1 && parsed.nonce.is_none() {
            self.answer_one(store, i, &responder, &parsed.queries[0], now)
                .await
        } else {
            self.answer_signed(
                store,
                i,
                &responder,
                &parsed.queries,
                parsed.nonce.as_deref(),
                now,
            )
            .await
        };
        result.unwrap_or_else(OcspAnswer::failure)
    }

    /// One certificate, no nonce: a kept answer when there is a good one.
    async fn answer_one(
        &self,
        store: &Store,
        slot: usize,
        responder: &OcspResponder,
        q: &CertQuery,
        now: SystemTime,
    ) -> Result<OcspAnswer, OcspFailure> {
        let key = (slot, q.serial.clone());
        let generation = self.generation.load(Ordering::Acquire);
        let now_ms = self.started.elapsed().as_millis() as u64;
        let kept = self
            .kept
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned();
        let reusable = |k: &Kept| {
            k.generation == generation
                && k.next_update
                    .duration_since(now)
                    .is_ok_and(|left| left >= self.validity / 2)
        };
        if let Some(k) = &kept
            && reusable(k)
            && now_ms.saturating_sub(k.checked_ms.load(Ordering::Acquire))
                < STATUS_FRESHNESS.as_millis() as u64
        {
            return Ok(self.answer_of(k, now));
        }
        let status = self.status(store, slot, &q.serial).await?;
        if let Some(k) = &kept
            && reusable(k)
            && k.status == status
        {
            k.checked_ms.store(now_ms, Ordering::Release);
            return Ok(self.answer_of(k, now));
        }
        let times = self.times(now);
        let der = responder
            .respond(&[(q, status)], times, None)
            .map_err(|e| {
                tracing::error!(error = %e, "signing an OCSP response failed");
                OcspFailure::InternalError
            })?;
        let k = Arc::new(Kept {
            der: Bytes::from(der),
            status,
            next_update: times.next_update,
            generation,
            checked_ms: AtomicU64::new(now_ms),
        });
        let answer = self.answer_of(&k, now);
        let mut map = self.kept.write().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_KEPT {
            map.clear();
        }
        map.insert(key, k);
        Ok(answer)
    }

    /// Several certificates or a nonce: read and signed for this request.
    async fn answer_signed(
        &self,
        store: &Store,
        slot: usize,
        responder: &OcspResponder,
        queries: &[CertQuery],
        nonce: Option<&[u8]>,
        now: SystemTime,
    ) -> Result<OcspAnswer, OcspFailure> {
        let mut entries = Vec::with_capacity(queries.len());
        for q in queries {
            entries.push((q, self.status(store, slot, &q.serial).await?));
        }
        let times = self.times(now);
        let der = responder.respond(&entries, times, nonce).map_err(|e| {
            tracing::error!(error = %e, "signing an OCSP response failed");
            OcspFailure::InternalError
        })?;
        Ok(OcspAnswer {
            der: Bytes::from(der),
            max_age: Some(self.validity.as_secs()),
        })
    }

    fn answer_of(&self, k: &Kept, now: SystemTime) -> OcspAnswer {
        OcspAnswer {
            der: k.der.clone(),
            max_age: Some(
                k.next_update
                    .duration_since(now)
                    .map(|d| d.as_secs())
                    .unwrap_or(0),
            ),
        }
    }

    fn times(&self, now: SystemTime) -> OcspTimes {
        OcspTimes {
            produced_at: now,
            this_update: now,
            next_update: now + self.validity,
        }
    }

    /// The status of the certificate with serial `serial` of slot `slot`'s
    /// CA. A database error is `tryLater`.
    async fn status(
        &self,
        store: &Store,
        slot: usize,
        serial: &[u8],
    ) -> Result<OcspCertStatus, OcspFailure> {
        let s = &self.slots[slot];
        if let Some(issued) = &s.issued_ca_serials {
            return Ok(if issued.iter().any(|x| x.as_slice() == serial) {
                OcspCertStatus::Good
            } else {
                OcspCertStatus::Unknown
            });
        }
        // Stored serials are 20 bytes as 40 hex digits.
        if serial.len() > 20 {
            return Ok(OcspCertStatus::Unknown);
        }
        let mut padded = [0u8; 20];
        padded[20 - serial.len()..].copy_from_slice(serial);
        let hex = warrant_ca::serial_hex(&padded);
        let row = store
            .certs()
            .get_cert(s.ca.name(), &hex)
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "OCSP status read failed");
                OcspFailure::TryLater
            })?;
        Ok(match row {
            None => OcspCertStatus::Unknown,
            Some(r) if r.status == CertStatus::Valid => OcspCertStatus::Good,
            Some(r) => OcspCertStatus::Revoked {
                at: from_unix(r.revoked_at.unwrap_or(r.created_at)),
                reason: r
                    .revocation_reason
                    .as_deref()
                    .and_then(|s| s.parse::<RevocationReason>().ok())
                    .filter(|r| *r != RevocationReason::Unspecified),
            },
        })
    }

    /// Slot `i`'s responder, replaced first if half its life has passed.
    fn responder(&self, i: usize, now: SystemTime) -> warrant_ca::Result<Arc<OcspResponder>> {
        let s = &self.slots[i];
        let r = current(&s.responder);
        if now + self.lifetime / 2 < r.not_after() {
            return Ok(r);
        }
        // One replacement at a time; the others keep answering with the
        // current responder, which is still valid.
        let Ok(_guard) = s.replacing.try_lock() else {
            return Ok(r);
        };
        let again = current(&s.responder);
        if now + self.lifetime / 2 < again.not_after() {
            return Ok(again);
        }
        let fresh = Arc::new(OcspResponder::new(&s.ca, now, self.lifetime)?);
        *s.responder.write().unwrap_or_else(|p| p.into_inner()) = fresh.clone();
        self.invalidate();
        tracing::info!(ca = s.ca.name(), "OCSP responder certificate replaced");
        Ok(fresh)
    }
}

impl Slot {
    fn new(
        ca: Arc<IssuingCa>,
        issued_ca_serials: Option<Vec<Vec<u8>>>,
        now: SystemTime,
        lifetime: Duration,
    ) -> warrant_ca::Result<Self> {
        let responder = OcspResponder::new(&ca, now, lifetime)?;
        Ok(Slot {
            ca,
            issued_ca_serials,
            responder: RwLock::new(Arc::new(responder)),
            replacing: Mutex::new(()),
        })
    }
}

fn current(r: &RwLock<Arc<OcspResponder>>) -> Arc<OcspResponder> {
    r.read().unwrap_or_else(|p| p.into_inner()).clone()
}

//! The HTTP surface: routes and thin handlers, one module per resource
//! (`users`, `tokens`, `certs`, `audit`, `ca`, `ocsp`, `oauth`, `probes`), the caller
//! extractor (`caller`) and the delegations console's static page (`console`, `/ui/`).

mod audit;
mod ca;
mod caller;
mod certs;
mod console;
mod oauth;
mod ocsp;
mod probes;
mod tokens;
mod users;

pub use certs::pem;

use crate::error::{ApiError, ErrorKey};
use crate::extract::MAX_BODY_BYTES;
use crate::state::SharedState;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post};

/// Probes and scrapes (`/healthz`, `/readyz`, `/metrics`) are outside the
/// per-client rate limit: a monitor must see an overloaded server as it is.
/// Every other request is inside it: the `/api/…` routes, login included
/// (slowing password guessing is one of its jobs), and unknown paths and
/// methods, so that a client probing for routes spends the same budget.
pub fn router(state: SharedState) -> Router {
    let probes = Router::new()
        .route("/healthz", get(probes::healthz))
        .route("/readyz", get(probes::readyz))
        .route("/metrics", get(probes::metrics))
        .method_not_allowed_fallback(method_not_allowed);
    let limited = api_routes()
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(crate::middleware::RateLimitLayer::new(state.clone()));
    probes
        .merge(limited)
        .layer(crate::middleware::ObserveLayer)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            crate::error::panic_response,
        ))
        .with_state(state)
}

fn api_routes() -> Router<SharedState> {
    Router::new()
        .route("/api/v1/version", get(probes::version))
        .route("/api/v1/users/login", post(users::login))
        .route("/api/v1/users/logout", post(users::logout))
        .route("/api/v1/users/info", get(users::info))
        .route(
            "/api/v1/users",
            get(users::list_users).post(users::create_user),
        )
        .route(
            "/api/v1/users/{id}",
            delete(users::delete_user).patch(users::update_user),
        )
        .route(
            "/api/v1/users/{id}/operator-cert",
            post(users::issue_operator_cert),
        )
        .route(
            "/api/v1/tokens",
            get(tokens::list_tokens).post(tokens::create_token),
        )
        .route("/api/v1/tokens/{id}", delete(tokens::delete_token))
        .route(
            "/api/v1/certs",
            get(certs::list_certs).post(certs::issue_cert),
        )
        .route("/api/v1/certs/renew", post(certs::renew_cert))
        .route("/api/v1/audit", get(audit::list))
        .route("/api/v1/audit/checkpoint", get(audit::checkpoint))
        .route("/api/v1/audit/proof/inclusion", get(audit::inclusion))
        .route("/api/v1/audit/proof/consistency", get(audit::consistency))
        .route(
            "/api/v1/certs/revoke-by-principal",
            post(certs::revoke_by_principal),
        )
        .route("/api/v1/cert/{ca}/{serial}", get(certs::get_cert))
        .route(
            "/api/v1/cert/{ca}/{serial}/revoke",
            post(certs::revoke_cert),
        )
        .route("/api/v1/crl/{ca}", get(ca::crl))
        .route("/api/v1/ca/{name}", get(ca::ca_cert))
        .route("/ocsp", post(ocsp::post))
        .route("/ocsp/{*request}", get(ocsp::get))
        .route("/oauth/token", post(oauth::token))
        .route("/.well-known/jwks.json", get(oauth::jwks))
        .route("/ui", get(console::redirect))
        .route("/ui/", get(console::index))
        .route("/ui/{file}", get(console::file))
}

async fn not_found() -> ApiError {
    ApiError::detail(ErrorKey::NotFound, "no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(ErrorKey::MethodNotAllowed)
}

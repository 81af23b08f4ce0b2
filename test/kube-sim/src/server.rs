//! The HTTP(S) front: TLS, authentication, routing, authorization, fault injection, metrics,
//! and the handlers that turn requests into [`Sim`] operations.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch as signal;

use crate::auth::{Attributes, Authn, UserInfo, authenticate_token, forbidden_message};
use crate::discovery;
use crate::error::{ApiError, ApiResult};
use crate::in_process;
use crate::meta::{FieldSelector, LabelSelector};
use crate::resources::{Builtin, ResourceType};
use crate::sim::{DeleteOpts, FieldValidation, Sim, WriteOpts};
use crate::table::Shape;
use crate::watch::{self, Selection, WatchParams};

type Body = BoxBody<Bytes, Infallible>;

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

fn json_response(code: u16, v: &Value) -> Response<Body> {
    json_bytes_response(code, v.to_string().into_bytes())
}

fn json_bytes_response(code: u16, body: Vec<u8>) -> Response<Body> {
    let mut r = Response::new(full(body));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn error_response(e: &ApiError) -> Response<Body> {
    json_response(e.code, &e.status())
}

/// Decodes a query string (`a=b&c=d`, percent-encoded, `+` as space).
pub fn query_params(q: Option<&str>) -> HashMap<String, String> {
    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    match u8::from_str_radix(
                        std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz"),
                        16,
                    ) {
                        Ok(b) => {
                            out.push(b);
                            i += 2;
                        }
                        Err(_) => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    q.unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

/// A request against a resource, parsed from its path.
#[derive(Clone, Debug)]
struct ResourceRequest {
    rt: Arc<ResourceType>,
    namespace: String,
    name: String,
    subresource: String,
}

enum Route {
    Root,
    Version,
    Health,
    CoreVersions,
    Groups,
    Group(String),
    ResourceList(String, String),
    OpenApiIndex,
    OpenApiDoc(String, String),
    Resource(ResourceRequest),
}

fn route(sim: &Sim, path: &str) -> ApiResult<Route> {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let resource = |group: &str, version: &str, rest: &[&str]| -> ApiResult<Route> {
        if rest.is_empty() {
            return Ok(Route::ResourceList(group.to_owned(), version.to_owned()));
        }
        let store = sim.store();
        let reg = &store.registry;
        let find = |plural: &str| reg.find(group, version, plural);
        let not_found = || ApiError::no_route(path);
        // /namespaces/{ns}/{plural}[/{name}[/{sub}]] for namespaced kinds
        if rest[0] == "namespaces"
            && rest.len() >= 3
            && let Some(rt) = find(rest[2]).filter(|t| t.namespaced)
        {
            if rest.len() > 5 {
                return Err(not_found());
            }
            return Ok(Route::Resource(ResourceRequest {
                rt,
                namespace: rest[1].to_owned(),
                name: rest.get(3).map(|s| (*s).to_owned()).unwrap_or_default(),
                subresource: rest.get(4).map(|s| (*s).to_owned()).unwrap_or_default(),
            }));
        }
        let rt = find(rest[0]).ok_or_else(not_found)?;
        if rest.len() > 3 || (rt.namespaced && rest.len() > 1) {
            return Err(not_found());
        }
        let sub = rest.get(2).map(|s| (*s).to_owned()).unwrap_or_default();
        if !sub.is_empty() && !rt.subresources.contains(&sub) {
            return Err(not_found());
        }
        Ok(Route::Resource(ResourceRequest {
            rt,
            namespace: String::new(),
            name: rest.get(1).map(|s| (*s).to_owned()).unwrap_or_default(),
            subresource: sub,
        }))
    };
    match segs.as_slice() {
        [] => Ok(Route::Root),
        ["version"] => Ok(Route::Version),
        ["healthz" | "livez" | "readyz"] => Ok(Route::Health),
        ["api"] => Ok(Route::CoreVersions),
        ["apis"] => Ok(Route::Groups),
        ["apis", g] => Ok(Route::Group((*g).to_owned())),
        ["openapi", "v3"] => Ok(Route::OpenApiIndex),
        ["openapi", "v3", "api", v] => Ok(Route::OpenApiDoc(String::new(), (*v).to_owned())),
        ["openapi", "v3", "apis", g, v] => Ok(Route::OpenApiDoc((*g).to_owned(), (*v).to_owned())),
        ["api", v, rest @ ..] => resource("", v, rest),
        ["apis", g, v, rest @ ..] => resource(g, v, rest),
        _ => Err(ApiError::no_route(path)),
    }
}

fn verb_of(method: &Method, r: &ResourceRequest, params: &HashMap<String, String>) -> &'static str {
    let watching = params.get("watch").is_some_and(|w| w == "true" || w == "1");
    match *method {
        Method::GET | Method::HEAD if r.name.is_empty() && watching => "watch",
        Method::GET | Method::HEAD if r.name.is_empty() => "list",
        Method::GET | Method::HEAD => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if r.name.is_empty() => "deletecollection",
        Method::DELETE => "delete",
        _ => "unknown",
    }
}

/// Who a connection authenticated as with its client certificate.
pub type PeerIdentity = Option<(String, Vec<String>)>;

/// Applies `Impersonate-User`/`Impersonate-Group` headers, if the requester may impersonate.
fn impersonate(sim: &Sim, req: &Request<Incoming>, user: UserInfo) -> Result<UserInfo, ApiError> {
    let Some(target) = req
        .headers()
        .get("impersonate-user")
        .and_then(|h| h.to_str().ok())
    else {
        return Ok(user);
    };
    let mut groups: Vec<String> = req
        .headers()
        .get_all("impersonate-group")
        .iter()
        .filter_map(|h| h.to_str().ok().map(str::to_owned))
        .collect();
    let check = |resource: &str, name: &str, namespace: &str| -> Result<(), ApiError> {
        let attrs = Attributes {
            verb: "impersonate".into(),
            api_group: String::new(),
            resource: resource.into(),
            name: name.into(),
            namespace: namespace.into(),
            ..Default::default()
        };
        if sim.authorize(&user, &attrs) {
            Ok(())
        } else {
            Err(ApiError::forbidden(forbidden_message(&user, &attrs)))
        }
    };
    let impersonated = if let Some(rest) = target.strip_prefix("system:serviceaccount:") {
        let (ns, name) = rest.split_once(':').unwrap_or(("", rest));
        check("serviceaccounts", name, ns)?;
        let mut u = UserInfo::service_account(ns, name, "");
        u.groups.append(&mut groups);
        u
    } else {
        check("users", target, "")?;
        for g in &groups {
            check("groups", g, "")?;
        }
        UserInfo::authenticated(target, groups)
    };
    Ok(impersonated)
}

fn authenticate(
    sim: &Sim,
    req: &Request<Incoming>,
    peer: &PeerIdentity,
) -> Result<UserInfo, ApiError> {
    let user = authenticate_direct(sim, req, peer)?;
    impersonate(sim, req, user)
}

fn authenticate_direct(
    sim: &Sim,
    req: &Request<Incoming>,
    peer: &PeerIdentity,
) -> Result<UserInfo, ApiError> {
    if sim.inner.opts.insecure_http {
        return Ok(UserInfo::authenticated(
            "admin",
            vec!["system:masters".into()],
        ));
    }
    if let Some(auth) = req
        .headers()
        .get("authorization")
        .and_then(|h| h.to_str().ok())
    {
        let Some(token) = auth.strip_prefix("Bearer ").map(str::trim) else {
            return Err(ApiError::unauthorized());
        };
        let now = jiff::Timestamp::now().as_second();
        let store = sim.store();
        let tokens = sim.tokens();
        return match authenticate_token(&tokens, &store, token, now) {
            Authn::User(u) => Ok(u),
            Authn::Invalid => Err(ApiError::unauthorized()),
        };
    }
    if let Some((user, groups)) = peer {
        return Ok(UserInfo::authenticated(user.clone(), groups.clone()));
    }
    Ok(UserInfo::anonymous())
}

fn parse_body(content_type: &str, body: &[u8]) -> ApiResult<Value> {
    if body.is_empty() {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    if crate::protobuf::is_protobuf(content_type) {
        return crate::protobuf::decode(body);
    }
    if content_type.contains("yaml") {
        serde_yaml::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
    } else {
        serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("json: cannot unmarshal the request body: {e}"))
        })
    }
}

/// Handles one HTTP request.
pub async fn handle(
    sim: Sim,
    server_addr: String,
    peer: PeerIdentity,
    req: Request<Incoming>,
) -> Response<Body> {
    let faults = &sim.inner.faults;
    if faults.active() {
        let latency = faults.latency();
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
    }
    let mut user = None;
    let (verb, resource, response) = match dispatch(&sim, &server_addr, &peer, req, &mut user).await
    {
        Ok(x) => x,
        Err((verb, resource, e)) => (verb, resource, error_response(&e)),
    };
    sim.inner.metrics.record(
        user.as_deref(),
        &verb,
        &resource,
        response.status().as_u16(),
    );
    response
}

type Failure = (String, String, ApiError);

async fn dispatch(
    sim: &Sim,
    server_addr: &str,
    peer: &PeerIdentity,
    req: Request<Incoming>,
    who: &mut Option<String>,
) -> Result<(String, String, Response<Body>), Failure> {
    let path = req.uri().path().to_owned();
    let params = query_params(req.uri().query());
    let fail = |verb: &str, res: &str, e: ApiError| (verb.to_owned(), res.to_owned(), e);
    let user = authenticate(sim, &req, peer).map_err(|e| fail("unknown", "", e))?;
    *who = Some(user.name.clone());
    let r = route(sim, &path).map_err(|e| fail("get", "", e))?;
    let Route::Resource(rr) = r else {
        // Non-resource requests: discovery, health, OpenAPI.
        let attrs = Attributes {
            verb: "get".into(),
            path: Some(path.clone()),
            ..Default::default()
        };
        if !sim.authorize(&user, &attrs) {
            return Err(fail(
                "get",
                "",
                ApiError::forbidden(forbidden_message(&user, &attrs)),
            ));
        }
        let store = sim.store();
        let reg = &store.registry;
        let body = match r {
            Route::Root => Some(
                json!({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/openapi/v3", "/readyz", "/version"]}),
            ),
            Route::Version => Some(discovery::version()),
            Route::Health => {
                let mut resp = Response::new(full("ok"));
                resp.headers_mut().insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; charset=utf-8"),
                );
                return Ok(("get".into(), "".into(), resp));
            }
            Route::CoreVersions => Some(discovery::core_versions(server_addr)),
            Route::Groups => Some(discovery::group_list(reg)),
            Route::Group(g) => discovery::group(reg, &g),
            Route::ResourceList(g, v) => discovery::resource_list(reg, &g, &v),
            Route::OpenApiIndex => Some(discovery::openapi_index(reg)),
            Route::OpenApiDoc(g, v) => discovery::openapi_doc(reg, &g, &v),
            Route::Resource(_) => None,
        };
        return match body {
            Some(b) => Ok(("get".into(), "".into(), json_response(200, &b))),
            None => Err(fail("get", "", ApiError::no_route(&path))),
        };
    };
    let verb = verb_of(req.method(), &rr, &params);
    let resource = rr.rt.plural.clone();
    // As the real server does, a list or watch pinned to one name by a field selector is
    // authorized as a request for that name (so resourceNames rules allow it).
    let name = if rr.name.is_empty() && matches!(verb, "list" | "watch") {
        params
            .get("fieldSelector")
            .and_then(|f| FieldSelector::parse(f, &|_| true).ok())
            .and_then(|f| f.name().map(str::to_owned))
            .filter(|_| {
                params
                    .get("fieldSelector")
                    .is_some_and(|f| !f.contains(','))
            })
            .unwrap_or_default()
    } else {
        rr.name.clone()
    };
    let attrs = Attributes {
        verb: verb.into(),
        api_group: rr.rt.group.clone(),
        resource: resource.clone(),
        subresource: rr.subresource.clone(),
        name,
        namespace: rr.namespace.clone(),
        path: None,
    };
    let allowed = sim.authorize(&user, &attrs);
    sim.inner.metrics.record_access(crate::metrics::Access {
        allowed,
        user: user.name.clone(),
        verb: verb.into(),
        api_group: attrs.api_group.clone(),
        resource: if attrs.subresource.is_empty() {
            resource.clone()
        } else {
            format!("{resource}/{}", attrs.subresource)
        },
        namespace: attrs.namespace.clone(),
    });
    if !allowed {
        return Err(fail(
            verb,
            &resource,
            ApiError::forbidden(forbidden_message(&user, &attrs)),
        ));
    }
    if sim.inner.faults.active()
        && let Some(code) = sim.inner.faults.error_for(verb, &resource, &user.name)
    {
        return Err(fail(verb, &resource, ApiError::injected(code)));
    }
    let shape = if matches!(verb, "get" | "list" | "watch") {
        let accept = req
            .headers()
            .get("accept")
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        Shape::parse(
            accept,
            verb,
            params.get("includeObject").map(String::as_str),
        )
        .map_err(|m| fail(verb, &resource, ApiError::not_acceptable(m)))?
    } else {
        Shape::Full
    };
    let content_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("application/json")
        .to_owned();
    let user_agent = req
        .headers()
        .get("user-agent")
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .map_err(|e| {
            fail(
                verb,
                &resource,
                ApiError::bad_request(format!("reading the body: {e}")),
            )
        })?;
    let result = serve_resource(
        sim,
        &user,
        &rr,
        verb,
        &params,
        shape,
        &content_type,
        &user_agent,
        &body,
    );
    match result {
        Ok(resp) => Ok((verb.into(), resource, resp)),
        Err(e) => Err(fail(verb, &resource, e)),
    }
}

fn write_opts(params: &HashMap<String, String>, user_agent: &str) -> ApiResult<WriteOpts> {
    Ok(WriteOpts {
        field_manager: params.get("fieldManager").cloned(),
        dry_run: params.get("dryRun").is_some_and(|d| d == "All"),
        field_validation: FieldValidation::parse(
            params
                .get("fieldValidation")
                .map(String::as_str)
                .unwrap_or(""),
        )?,
        user_agent: user_agent.to_owned(),
        force: params.get("force").is_some_and(|f| f == "true"),
    })
}

fn with_warnings(mut resp: Response<Body>, warnings: &[String]) -> Response<Body> {
    for w in warnings {
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{}\"", w.replace('"', "\\\""))) {
            resp.headers_mut().append("warning", v);
        }
    }
    resp
}

/// An apply that creates its object needs `create` on that name as well as `patch`, as
/// kube-apiserver checks it (k8s.io/apiserver `pkg/endpoints/handlers/patch.go`:
/// `createAuthorizerAttributes`, verb `create` with the object's name, authorized when the
/// apply patch creates). Recorded in the access log like any other check.
/// The CertificateApproval admission plugin, on by default: a write of a CSR's `approval`
/// subresource needs `approve` on the `signers` resource named for its signer, or for the
/// signer's domain with `/*` (kubernetes `plugin/pkg/admission/certificates/approval/
/// admission.go`, `certificates.IsAuthorizedForSignerName` in
/// `plugin/pkg/admission/certificates/util.go`).
fn admit_approval(sim: &Sim, user: &UserInfo, rr: &ResourceRequest) -> ApiResult<()> {
    if rr.subresource != "approval" || rr.rt.builtin != Some(Builtin::CertificateSigningRequest) {
        return Ok(());
    }
    let csr = sim.get(&rr.rt, "", &rr.name)?;
    let signer = csr
        .pointer("/spec/signerName")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let on = |name: String| Attributes {
        verb: "approve".into(),
        api_group: "certificates.k8s.io".into(),
        resource: "signers".into(),
        subresource: String::new(),
        name,
        namespace: String::new(),
        path: None,
    };
    let domain = signer.split('/').next().unwrap_or_default();
    if sim.authorize(user, &on(signer.clone())) || sim.authorize(user, &on(format!("{domain}/*"))) {
        return Ok(());
    }
    Err(ApiError::forbidden(format!(
        "certificatesigningrequests.certificates.k8s.io \"{}\" is forbidden: user not permitted to approve requests with signerName \"{signer}\"",
        rr.name
    )))
}

fn authorize_create_by_apply(sim: &Sim, user: &UserInfo, rr: &ResourceRequest) -> ApiResult<()> {
    let attrs = Attributes {
        verb: "create".into(),
        api_group: rr.rt.group.clone(),
        resource: rr.rt.plural.clone(),
        subresource: String::new(),
        name: rr.name.clone(),
        namespace: rr.namespace.clone(),
        path: None,
    };
    let allowed = sim.authorize(user, &attrs);
    sim.inner.metrics.record_access(crate::metrics::Access {
        allowed,
        user: user.name.clone(),
        verb: attrs.verb.clone(),
        api_group: attrs.api_group.clone(),
        resource: attrs.resource.clone(),
        namespace: attrs.namespace.clone(),
    });
    if allowed {
        Ok(())
    } else {
        Err(ApiError::forbidden(forbidden_message(user, &attrs)))
    }
}

#[allow(clippy::too_many_arguments)]
fn serve_resource(
    sim: &Sim,
    user: &UserInfo,
    rr: &ResourceRequest,
    verb: &str,
    params: &HashMap<String, String>,
    shape: Shape,
    content_type: &str,
    user_agent: &str,
    body: &[u8],
) -> ApiResult<Response<Body>> {
    let rt = &rr.rt;
    let ns = rr.namespace.as_str();
    if rt.namespaced && ns.is_empty() && !matches!(verb, "list" | "watch") {
        return Err(ApiError::no_route(&format!(
            "{} requires a namespace",
            rt.plural
        )));
    }
    match verb {
        "get" => match shape {
            Shape::Table(include) => {
                let obj = sim.get(rt, ns, &rr.name)?;
                Ok(json_response(
                    200,
                    &crate::table::table(rt, &[obj], include, json!({})),
                ))
            }
            Shape::Metadata => {
                let obj = sim.get(rt, ns, &rr.name)?;
                Ok(json_response(200, &crate::table::partial_metadata(&obj)))
            }
            Shape::Full => {
                let stored = sim.get_stored(rt, ns, &rr.name)?;
                Ok(json_bytes_response(
                    200,
                    crate::convert::encode_presented(rt, &stored),
                ))
            }
        },
        "list" | "watch" => {
            let sel = selection(rt, ns, params)?;
            if verb == "list" {
                let limit = params
                    .get("limit")
                    .and_then(|l| l.parse().ok())
                    .filter(|l: &usize| *l > 0);
                let v = watch::list(
                    sim,
                    &sel,
                    limit,
                    params.get("continue").map(String::as_str),
                    shape,
                )?;
                return Ok(json_response(200, &v));
            }
            let wp = WatchParams {
                resource_version: params.get("resourceVersion").cloned(),
                bookmarks: params
                    .get("allowWatchBookmarks")
                    .is_some_and(|b| b == "true"),
                timeout: params
                    .get("timeoutSeconds")
                    .and_then(|t| t.parse().ok())
                    .map(Duration::from_secs),
                send_initial_events: params.get("sendInitialEvents").is_some_and(|b| b == "true"),
                shape,
            };
            let mut rx = watch::watch(sim, sel, wp);
            let stream = futures::stream::poll_fn(move |cx| {
                rx.poll_recv(cx)
                    .map(|o| o.map(|b| Ok::<_, Infallible>(Frame::data(b))))
            });
            let mut resp = Response::new(StreamBody::new(stream).boxed());
            resp.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            resp.headers_mut()
                .insert("transfer-encoding", HeaderValue::from_static("chunked"));
            Ok(resp)
        }
        "create" => {
            let obj = parse_body(content_type, body)?;
            if rt.virtual_kind {
                return Ok(json_response(201, &sim.review(user, rt, obj)?));
            }
            if rr.subresource == "token" && rt.builtin == Some(Builtin::ServiceAccount) {
                return Ok(json_response(201, &sim.token_request(ns, &rr.name, &obj)?));
            }
            if !rr.name.is_empty() {
                return Err(ApiError::method_not_allowed(format!(
                    "POST to a named {} is not supported",
                    rt.kind
                )));
            }
            let w = sim.create(user, rt, ns, obj, &write_opts(params, user_agent)?)?;
            Ok(with_warnings(json_response(201, &w.object), &w.warnings))
        }
        "update" => {
            let obj = parse_body(content_type, body)?;
            admit_approval(sim, user, rr)?;
            let w = sim.update(
                rt,
                ns,
                &rr.name,
                &rr.subresource,
                obj,
                &write_opts(params, user_agent)?,
            )?;
            Ok(with_warnings(json_response(200, &w.object), &w.warnings))
        }
        "patch" => {
            if content_type.starts_with("application/apply-patch")
                && rr.subresource.is_empty()
                && sim.get(rt, ns, &rr.name).is_err()
            {
                authorize_create_by_apply(sim, user, rr)?;
            }
            admit_approval(sim, user, rr)?;
            let w = sim.patch(
                user,
                rt,
                ns,
                &rr.name,
                &rr.subresource,
                content_type,
                body,
                &write_opts(params, user_agent)?,
            )?;
            Ok(with_warnings(
                json_response(if w.created { 201 } else { 200 }, &w.object),
                &w.warnings,
            ))
        }
        "delete" => {
            let opts = delete_opts(params, content_type, body)?;
            let (v, gone) = sim.delete(rt, ns, &rr.name, &opts)?;
            Ok(json_response(if gone { 200 } else { 202 }, &v))
        }
        "deletecollection" => {
            let sel = selection(rt, ns, params)?;
            let listed = watch::list(sim, &sel, None, None, Shape::Full)?;
            let opts = delete_opts(params, content_type, body)?;
            let mut items = Vec::new();
            for item in listed["items"].as_array().cloned().unwrap_or_default() {
                let name = crate::meta::meta_str(&item, "name")
                    .unwrap_or_default()
                    .to_owned();
                let item_ns = crate::meta::meta_str(&item, "namespace")
                    .unwrap_or_default()
                    .to_owned();
                if let Ok((_, _)) = sim.delete(rt, &item_ns, &name, &opts) {
                    items.push(item);
                }
            }
            Ok(json_response(
                200,
                &json!({"kind": rt.list_kind, "apiVersion": rt.api_version(), "metadata": {}, "items": items}),
            ))
        }
        _ => Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        )),
    }
}

/// What a list, watch or deletecollection selects.
fn selection(
    rt: &Arc<ResourceType>,
    ns: &str,
    params: &HashMap<String, String>,
) -> ApiResult<Selection> {
    let param = |k: &str| params.get(k).map(String::as_str).unwrap_or("");
    Ok(Selection {
        rt: rt.clone(),
        namespace: (!ns.is_empty()).then(|| ns.to_owned()),
        labels: LabelSelector::parse(param("labelSelector"))?,
        fields: FieldSelector::parse(param("fieldSelector"), &|f| rt.supports_field(f))?,
    })
}

fn delete_opts(
    params: &HashMap<String, String>,
    content_type: &str,
    body: &[u8],
) -> ApiResult<DeleteOpts> {
    let b: Value = if body.is_empty() {
        json!({})
    } else {
        parse_body(content_type, body)?
    };
    let s = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_owned);
    Ok(DeleteOpts {
        propagation: params
            .get("propagationPolicy")
            .cloned()
            .or_else(|| s(&b, "/propagationPolicy"))
            .or_else(|| {
                b.get("orphanDependents").and_then(Value::as_bool).map(|o| {
                    if o {
                        "Orphan".into()
                    } else {
                        "Background".into()
                    }
                })
            }),
        precondition_uid: s(&b, "/preconditions/uid"),
        precondition_rv: s(&b, "/preconditions/resourceVersion"),
        dry_run: params.get("dryRun").is_some_and(|d| d == "All")
            || b.get("dryRun")
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(|d| d == "All")),
    })
}

/// TLS configuration: the serving certificate; client certificates signed by the CA are
/// verified when presented, and optional.
pub fn tls_config(sim: &Sim) -> Result<Arc<rustls::ServerConfig>, crate::StartError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let err = |e: &dyn std::fmt::Display| crate::StartError::Tls(e.to_string());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let pki = &sim.inner.pki;
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(pki.serving_cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| err(&e))?;
    let key = PrivateKeyDer::from_pem_slice(pki.serving_key_pem.as_bytes()).map_err(|e| err(&e))?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(pki.ca_pem().as_bytes()) {
        roots.add(ca.map_err(|e| err(&e))?).map_err(|e| err(&e))?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()
    .map_err(|e| err(&e))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| err(&e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| err(&e))?;
    // HTTP/2 first, as kube-apiserver offers it: one connection carries every watch and
    // request of a client.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Binds with SO_REUSEADDR so an outage can release and re-take the port.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    TcpListener::from_std(socket.into())
}

/// Accepts connections until `shutdown` turns true, honouring outages.
pub async fn serve(
    sim: Sim,
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    mut shutdown: signal::Receiver<bool>,
) {
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            tracing::error!(error = %e, "listener has no address");
            return;
        }
    };
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let mut outage = sim.inner.faults.outage_changes();
    let opens_door = sim.inner.opts.in_process_connections;
    let mut door = opens_door.then(|| in_process::Door::open(addr));
    let mut listener = Some(listener);
    let serving = Serving {
        sim: sim.clone(),
        acceptor,
        shutdown: shutdown.clone(),
        addr,
    };
    loop {
        let Some(l) = listener.as_ref() else {
            // In an outage: wait for it to end (or for shutdown), then take the port again.
            tokio::select! {
                r = outage.wait_for(|o| !*o) => if r.is_err() { return },
                _ = shutdown.wait_for(|s| *s) => return,
            }
            match bind(addr) {
                Ok(l) => listener = Some(l),
                Err(e) => {
                    tracing::error!(%addr, error = %e, "cannot re-bind after outage");
                    return;
                }
            }
            door = opens_door.then(|| in_process::Door::open(addr));
            continue;
        };
        let from_memory = async {
            match door.as_mut() {
                Some(d) => d.accept().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            r = outage.changed() => {
                if r.is_err() { return }
                if *outage.borrow() {
                    listener = None;
                    door = None;
                }
            }
            accepted = l.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                serving.spawn(stream, "");
            }
            Some(stream) = from_memory => serving.spawn(stream, " in process"),
        }
    }
}

/// What serves each connection a server accepts.
struct Serving {
    sim: Sim,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    shutdown: signal::Receiver<bool>,
    addr: SocketAddr,
}

impl Serving {
    /// Serves one connection (TCP or [`in_process`]) until it ends, an outage or shutdown;
    /// counted by protocol, `carrier` appended.
    fn spawn<I>(&self, stream: I, carrier: &'static str)
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let sim = self.sim.clone();
        let acceptor = self.acceptor.clone();
        let mut conn_outage = sim.inner.faults.outage_changes();
        let mut conn_shutdown = self.shutdown.clone();
        let server_addr = self.addr.to_string();
        tokio::spawn(async move {
            let work = async {
                match acceptor {
                    Some(acceptor) => {
                        let Ok(tls) = acceptor.accept(stream).await else {
                            return;
                        };
                        let protocol = match tls.get_ref().1.alpn_protocol() {
                            Some(p) => String::from_utf8_lossy(p).into_owned(),
                            None => "none".to_owned(),
                        };
                        sim.inner
                            .metrics
                            .record_connection(&format!("{protocol}{carrier}"));
                        let peer = tls
                            .get_ref()
                            .1
                            .peer_certificates()
                            .and_then(|c| c.first())
                            .and_then(|c| crate::pki::identity_of(c));
                        serve_conn(sim, server_addr, peer, TokioIo::new(tls)).await;
                    }
                    None => {
                        sim.inner
                            .metrics
                            .record_connection(&format!("plain{carrier}"));
                        serve_conn(sim, server_addr, None, TokioIo::new(stream)).await
                    }
                }
            };
            tokio::select! {
                _ = work => {}
                _ = conn_outage.wait_for(|o| *o) => {}
                _ = conn_shutdown.wait_for(|s| *s) => {}
            }
        });
    }
}

/// What kube-apiserver allows by default (`--http2-max-streams-per-connection`).
const MAX_STREAMS_PER_CONNECTION: u32 = 1000;

async fn serve_conn<I>(sim: Sim, server_addr: String, peer: PeerIdentity, io: TokioIo<I>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req| {
        let sim = sim.clone();
        let peer = peer.clone();
        let server_addr = server_addr.clone();
        async move { Ok::<_, Infallible>(handle(sim, server_addr, peer, req).await) }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().keep_alive(true);
    // kube-apiserver's own limit on concurrent streams (watches included) per connection.
    builder
        .http2()
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION);
    if let Err(e) = builder.serve_connection(io, service).await {
        tracing::trace!(error = %e, "connection ended");
    }
}

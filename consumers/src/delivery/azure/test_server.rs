//! A scripted HTTP/1.1 server standing in for Azure DevOps in tests.
//!
//! It listens on `127.0.0.1:0`, answers requests in the order of its script
//! (each [`Reply`] names the method and path it expects), records every
//! request it receives, and [`MockAzure::finish`] fails the test when a
//! request was unexpected or a scripted reply was never asked for.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// One scripted answer.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    method: String,
    path: String,
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    /// Answers `method path` with a JSON body.
    pub(crate) fn json(method: &str, path: &str, status: u16, body: &str) -> Self {
        Self {
            method: method.to_owned(),
            path: path.to_owned(),
            status,
            headers: vec![("Content-Type".to_owned(), "application/json; charset=utf-8".to_owned())],
            body: body.as_bytes().to_vec(),
        }
    }

    /// Answers `method path` with raw bytes.
    pub(crate) fn bytes(method: &str, path: &str, status: u16, body: &[u8]) -> Self {
        Self {
            method: method.to_owned(),
            path: path.to_owned(),
            status,
            headers: vec![("Content-Type".to_owned(), "application/octet-stream".to_owned())],
            body: body.to_vec(),
        }
    }

    /// Adds a response header.
    pub(crate) fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

/// A request the server received.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) query: Vec<(String, String)>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Recorded {
    /// A header by (case-insensitive) name.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// A decoded query parameter.
    pub(crate) fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The body as JSON.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }
}

#[derive(Debug, Default)]
struct State {
    script: VecDeque<Reply>,
    recorded: Vec<Recorded>,
    problems: Vec<String>,
}

/// The running server.
pub(crate) struct MockAzure {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

impl MockAzure {
    /// Starts a server that answers with `script`, in order.
    pub(crate) async fn start(script: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        let state = Arc::new(Mutex::new(State {
            script: script.into(),
            ..State::default()
        }));
        let shared = Arc::clone(&state);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = Arc::clone(&shared);
                tokio::spawn(async move {
                    if let Err(err) = serve(stream, &state).await {
                        state.lock().expect("state").problems.push(format!("I/O: {err}"));
                    }
                });
            }
        });
        Self { addr, state, task }
    }

    /// Appends `replies` to the script: answers that name the server's own
    /// address (a SAS URL to upload to) are written once it listens.
    pub(crate) fn script(&self, replies: Vec<Reply>) {
        self.state.lock().expect("state").script.extend(replies);
    }

    /// An absolute URL on this server.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Stops the server; panics when a request was unexpected or part of the
    /// script was not used. Returns the requests received, in order.
    pub(crate) async fn finish(self) -> Vec<Recorded> {
        self.task.abort();
        let state = self.state.lock().expect("state");
        assert!(state.problems.is_empty(), "mock Azure DevOps: {:#?}", state.problems);
        assert!(
            state.script.is_empty(),
            "mock Azure DevOps: replies never requested: {:#?}",
            state
                .script
                .iter()
                .map(|r| format!("{} {}", r.method, r.path))
                .collect::<Vec<_>>()
        );
        state.recorded.clone()
    }
}

async fn serve(mut stream: TcpStream, state: &Mutex<State>) -> std::io::Result<()> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let header_end = loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Ok(());
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&buffer[..header_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let target = request_line.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(key, value)| (key.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(key, _)| key == "content-length")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0);
    let mut body = buffer[header_end + 4..].to_vec();
    while body.len() < length {
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..read]);
    }
    let url = reqwest::Url::parse(&format!("http://mock{target}")).expect("request target");
    let recorded = Recorded {
        method: method.clone(),
        path: url.path().to_owned(),
        query: url
            .query_pairs()
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect(),
        headers,
        body,
    };
    let reply = {
        let mut state = state.lock().expect("state");
        let next = state.script.pop_front();
        let reply = match next {
            Some(reply) if reply.method == recorded.method && reply.path == recorded.path => reply,
            Some(reply) => {
                state.problems.push(format!(
                    "expected {} {}, got {} {}",
                    reply.method, reply.path, recorded.method, recorded.path
                ));
                Reply::json(&method, &recorded.path, 418, r#"{"message":"unexpected request"}"#)
            }
            None => {
                state
                    .problems
                    .push(format!("unexpected {} {}", recorded.method, recorded.path));
                Reply::json(&method, &recorded.path, 418, r#"{"message":"unexpected request"}"#)
            }
        };
        state.recorded.push(recorded);
        reply
    };
    let mut response = format!(
        "HTTP/1.1 {} Mock\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status,
        reply.body.len()
    );
    for (name, value) in &reply.headers {
        response.push_str(&format!("{name}: {value}\r\n"));
    }
    response.push_str("\r\n");
    stream.write_all(response.as_bytes()).await?;
    stream.write_all(&reply.body).await?;
    stream.shutdown().await?;
    Ok(())
}

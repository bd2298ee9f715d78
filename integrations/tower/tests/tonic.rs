//! End to end: tonic's client (`tonic::client::Grpc` over `Channel`s, a codec of raw bytes,
//! no protoc) balanced by `report_at_body_end` over gRPC servers on loopback (hyper's HTTP/2
//! server answering by hand: headers, messages, then `grpc-status` in the trailers). Real
//! time and sockets: the latencies asserted are lower bounds only.

mod common;

use bytes::{Buf, BufMut, Bytes};
use common::*;
use http_body::Frame;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use polylb_tower::{grpc, Balance, BoxError};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};
use tower::buffer::Buffer;
use tower::discover::ServiceList;

/// Messages as raw bytes: a codec needing no generated code.
#[derive(Clone, Copy, Debug, Default)]
struct Raw;

impl Codec for Raw {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// A response body the server's task writes frames into.
struct ChannelBody(mpsc::UnboundedReceiver<Frame<Bytes>>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|frame| frame.map(Ok))
    }
}

/// One length-prefixed, uncompressed gRPC message.
fn message(text: &'static str) -> Frame<Bytes> {
    let mut framed = vec![0];
    framed.extend_from_slice(&(text.len() as u32).to_be_bytes());
    framed.extend_from_slice(text.as_bytes());
    Frame::data(Bytes::from(framed))
}

fn status(code: &'static str) -> Frame<Bytes> {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static(code));
    Frame::trailers(trailers)
}

/// Answers as a gRPC server that sends its headers first: `/t.S/Unary` one message then
/// `unary_status` in the trailers; `/t.S/Stream` three messages 100 ms apart then OK;
/// `/t.S/StreamFails` one message then UNAVAILABLE; `/t.S/StreamCut` one message, then the
/// end of the stream with no status.
async fn answer(
    request: http::Request<hyper::body::Incoming>,
    unary_status: &'static str,
) -> Result<http::Response<ChannelBody>, Infallible> {
    let path = request.uri().path().to_string();
    // The request's one message.
    let _ = request.into_body().collect().await;
    let (frames, body) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        match path.as_str() {
            "/t.S/Unary" => {
                let _ = frames.send(message("reply"));
                let _ = frames.send(status(unary_status));
            }
            "/t.S/Stream" => {
                for _ in 0..3 {
                    let _ = frames.send(message("part"));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                let _ = frames.send(status("0"));
            }
            // Cut after a message: the stream ends with no status, as a proxy's
            // RST_STREAM(NO_ERROR) ends it for hyper.
            "/t.S/StreamCut" => {
                let _ = frames.send(message("part"));
            }
            _ => {
                let _ = frames.send(message("part"));
                let _ = frames.send(status("14"));
            }
        }
    });
    let response = http::Response::builder()
        .header("content-type", "application/grpc")
        .body(ChannelBody(body))
        .unwrap();
    Ok(response)
}

/// A gRPC server on loopback whose unary calls end with `unary_status`.
async fn server(unary_status: &'static str) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let service = hyper::service::service_fn(move |request| answer(request, unary_status));
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), service),
            );
        }
    });
    address
}

fn channel(address: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect_lazy()
}

type Request = http::Request<tonic::body::Body>;

async fn unary<S>(client: &mut tonic::client::Grpc<S>) -> Result<Bytes, Status>
where
    S: tonic::client::GrpcService<tonic::body::Body>,
    S::ResponseBody: http_body::Body<Data = Bytes> + Send + 'static,
    <S::ResponseBody as http_body::Body>::Error: Into<BoxError> + Send,
    S::Error: Into<BoxError>,
{
    client
        .ready()
        .await
        .map_err(|e| Status::unknown(e.into().to_string()))?;
    let path = http::uri::PathAndQuery::from_static("/t.S/Unary");
    let request = tonic::Request::new(Bytes::from_static(b"hi"));
    Ok(client.unary(request, path, Raw).await?.into_inner())
}

#[tokio::test]
async fn tonic_unary_replies_are_judged_by_their_trailers() {
    let (ok_server, unavailable_server) = (server("0").await, server("14").await);
    let servers = [channel(ok_server), channel(unavailable_server)];
    let balance = Balance::builder(ServiceList::new(servers))
        .config("loadbalance=roundrobin")
        .method(|request: &Request| request.uri().path())
        .report_at_body_end()
        .build()
        .unwrap();
    let balancer = balance.balancer().clone();
    let mut client = tonic::client::Grpc::new(Buffer::new(balance, 64));
    let mut failed = 0;
    for _ in 0..20 {
        match unary(&mut client).await {
            Ok(reply) => assert_eq!(&reply[..], b"reply"),
            Err(status) => {
                assert_eq!(status.code(), Code::Unavailable, "{status:?}");
                failed += 1;
            }
        }
    }
    assert_eq!(failed, 10);
    let endpoints = stats(&balancer);
    let [ok, unavailable] = [&endpoints["0"], &endpoints["1"]];
    assert_eq!(
        (ok["succeeded"].as_i64(), ok["failures"].as_i64()),
        (Some(10), Some(0))
    );
    assert_eq!(unavailable["failures"], 10, "{unavailable}");
    assert_eq!(unavailable["succeeded"], 0, "{unavailable}");
    assert_eq!(
        ok["active"].as_i64().unwrap() + unavailable["active"].as_i64().unwrap(),
        0
    );

    // Reported at the headers (the default), with grpc::classify, the same server's
    // UNAVAILABLE is a success: its headers come before its status.
    let at_headers = Balance::builder(ServiceList::new([channel(unavailable_server)]))
        .classify(grpc::classify)
        .build()
        .unwrap();
    let balancer = at_headers.balancer().clone();
    let mut client = tonic::client::Grpc::new(Buffer::new(at_headers, 64));
    let status = unary(&mut client).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    let endpoint = &stats(&balancer)["0"];
    assert_eq!(endpoint["succeeded"], 1, "{endpoint}");
}

#[tokio::test]
async fn a_tonic_stream_is_one_call_from_its_pick_to_its_status() {
    let address = server("0").await;
    let balance = Balance::builder(ServiceList::new([channel(address)]))
        .config("loadbalance=leastactive")
        .method(|request: &Request| request.uri().path())
        .report_at_body_end()
        .build()
        .unwrap();
    let balancer = balance.balancer().clone();
    let mut client = tonic::client::Grpc::new(Buffer::new(balance, 64));
    let method_row = |path: &str| {
        let endpoint = &stats(&balancer)["0"];
        let rows = endpoint["methods"].as_array().unwrap();
        let row = rows.iter().find(|row| row["method"] == path).unwrap();
        (row.clone(), endpoint["active"].as_i64().unwrap())
    };

    client.ready().await.unwrap();
    let path = http::uri::PathAndQuery::from_static("/t.S/Stream");
    let request = tonic::Request::new(Bytes::from_static(b"hi"));
    let mut stream = client
        .server_streaming(request, path, Raw)
        .await
        .unwrap()
        .into_inner();
    let mut parts = 0;
    while let Some(part) = stream.message().await.unwrap() {
        assert_eq!(&part[..], b"part");
        parts += 1;
        assert_eq!(method_row("/t.S/Stream").1, 1, "in flight while it streams");
    }
    assert_eq!(parts, 3);
    let (row, active) = method_row("/t.S/Stream");
    assert_eq!((active, row["succeeded"].as_i64()), (0, Some(1)), "{row}");
    // The endpoint's one success so far (polylb keeps no mean per method row).
    let mean_us = stats(&balancer)["0"]["mean_success_us"].as_i64().unwrap();
    assert!(
        mean_us >= 300_000,
        "the stream's life, not its headers: {mean_us} µs"
    );

    // A stream failing midway: UNAVAILABLE in its trailers, after a message.
    client.ready().await.unwrap();
    let path = http::uri::PathAndQuery::from_static("/t.S/StreamFails");
    let request = tonic::Request::new(Bytes::from_static(b"hi"));
    let mut stream = client
        .server_streaming(request, path, Raw)
        .await
        .unwrap()
        .into_inner();
    assert!(stream.message().await.unwrap().is_some());
    let status = stream.message().await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    let (row, active) = method_row("/t.S/StreamFails");
    assert_eq!((active, row["failures"].as_i64()), (0, Some(1)), "{row}");
}

#[tokio::test]
async fn a_tonic_stream_cut_without_a_status_is_a_failure() {
    let address = server("0").await;
    let balance = Balance::builder(ServiceList::new([channel(address)]))
        .report_at_body_end()
        .build()
        .unwrap();
    let balancer = balance.balancer().clone();
    let mut client = tonic::client::Grpc::new(Buffer::new(balance, 64));
    client.ready().await.unwrap();
    let path = http::uri::PathAndQuery::from_static("/t.S/StreamCut");
    let request = tonic::Request::new(Bytes::from_static(b"hi"));
    let mut stream = client
        .server_streaming(request, path, Raw)
        .await
        .unwrap()
        .into_inner();
    assert!(stream.message().await.unwrap().is_some());
    // tonic reads a gRPC stream that ends with no status as UNKNOWN: a failure
    // (docs/outcomes.md), as is a stream the server reset mid-call.
    let status = stream.message().await.unwrap_err();
    assert_eq!(status.code(), Code::Unknown, "{status:?}");
    let endpoint = &stats(&balancer)["0"];
    assert_eq!(endpoint["active"], 0, "{endpoint}");
    assert_eq!(endpoint["succeeded"], 0, "{endpoint}");
    assert_eq!(endpoint["failures"], 1, "{endpoint}");
}

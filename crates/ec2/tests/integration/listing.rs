//! The driver's own reader of DescribeInstances answers (`orca_ec2::read_listing`) against the
//! SDK's, on moto's answers as they come (straight from moto, and reshaped by the proxy): the same
//! bytes give the same machines and next token both ways, and the driver's listing is that reading.

use crate::common;

use std::sync::{Arc, Mutex};

use aws_sdk_ec2::config::interceptors::AfterDeserializationInterceptorContextRef;
use aws_sdk_ec2::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_ec2::error::BoxError;
use aws_sdk_ec2::types::{Filter, Tag};
use common::{env, made};
use orca_machines::{Machine, Provider, Status};

/// Keeps the body of the last answer its call read.
#[derive(Debug, Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Intercept for Capture {
    fn name(&self) -> &'static str {
        "capture"
    }

    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let body = context.response().body().bytes().unwrap_or_default();
        *self.0.lock().unwrap() = body.to_vec();
        Ok(())
    }
}

/// The raw answer of `endpoint` to a DescribeInstances of `pool` (its tag filter), page size `page`.
async fn raw_answer(endpoint: &str, pool: &str, page: i32, token: Option<String>) -> Vec<u8> {
    let capture = Capture::default();
    common::sdk(endpoint)
        .await
        .describe_instances()
        .filters(Filter::builder().name("tag:orca-pool").values(pool).build())
        .max_results(page)
        .set_next_token(token)
        .customize()
        .interceptor(capture.clone())
        .send()
        .await
        .unwrap();
    capture.0.lock().unwrap().clone()
}

fn by_id(mut machines: Vec<Machine>) -> Vec<Machine> {
    machines.sort_by(|a, b| a.id.cmp(&b.id));
    machines
}

#[tokio::test]
async fn moto_answers_read_the_same_both_ways() {
    let Some(e) = env("moto_answers_read_the_same_both_ways").await else {
        return;
    };
    let p = e.provider("stack-1").await;
    let running = made(p.create(&e.spec("both-1")).await.unwrap());
    let stopped = made(p.create(&e.spec("both-2")).await.unwrap());
    made(p.create(&e.spec("both-3")).await.unwrap());
    p.stop(&stopped.id).await.unwrap();
    // Tags no label may hold: every XML escape, non-ASCII text, an empty value.
    let odd = "a & b <c> \"d\" 'e' é 😀";
    common::sdk(&e.seed.moto)
        .await
        .create_tags()
        .resources(&running.id)
        .tags(Tag::builder().key("note").value(odd).build())
        .tags(Tag::builder().key("empty").value("").build())
        .send()
        .await
        .unwrap();

    let mut seen = Vec::new();
    for (endpoint, page) in [(e.seed.moto.as_str(), 1000), (e.proxy.url.as_str(), 5)] {
        let mut token = None;
        let mut pages = 0;
        loop {
            let body = raw_answer(endpoint, &e.pool, page, token).await;
            let (lean, sdk) = (
                orca_ec2::read_listing(&body),
                orca_ec2::read_listing_by_sdk(&body),
            );
            let text = String::from_utf8_lossy(&body);
            let lean =
                lean.unwrap_or_else(|why| panic!("the driver's reader left it: {why}\n{text}"));
            assert_eq!(Ok(lean.clone()), sdk, "{text}");
            seen.extend(lean.0);
            pages += 1;
            token = lean.1;
            if token.is_none() {
                break;
            }
        }
        assert!(pages >= 1, "{endpoint}");
    }
    assert_eq!(
        seen.len(),
        6,
        "three machines from moto, three through the proxy"
    );
    let from_proxy = by_id(seen.split_off(3));
    for m in [&seen, &from_proxy] {
        let note = m.iter().find(|m| m.id == running.id).unwrap();
        assert_eq!(
            (note.labels["note"].as_str(), note.labels["empty"].as_str()),
            (odd, "")
        );
    }
    // The proxy writes the stop's time into the reason as EC2 does.
    let stop = from_proxy.iter().find(|m| m.id == stopped.id).unwrap();
    assert_eq!(stop.status, Status::Stopped);
    assert!(stop.stopped_at.is_some(), "{stop:?}");
    // The driver's own listing (through the proxy) is what its reader made of the proxy's answer.
    assert_eq!(by_id(p.machines(&e.pool).await.unwrap()), from_proxy);
}

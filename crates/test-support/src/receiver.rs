//! The remote write receivers the push tests send to (Prometheus, VictoriaMetrics), and the queries that read
//! back what they stored.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use crate::component::{Component, Prometheus, VictoriaMetrics};

/// An HTTP client for the receivers' APIs.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap()
}

/// Which receiver.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// Prometheus with `--web.enable-remote-write-receiver`.
    Prometheus,
    /// VictoriaMetrics single node.
    Vm,
}

/// A remote write receiver process, and what the tests ask it.
pub struct Receiver {
    /// Which one.
    pub kind: Kind,
    /// The process.
    pub component: Component,
}

/// A series' labels, `__name__` among them.
pub type Labels = BTreeMap<String, String>;

impl Receiver {
    /// Prometheus with its remote write receiver, on a free port.
    pub async fn prometheus(bin: &Path) -> Receiver {
        Receiver::prometheus_as(Prometheus::new(bin)).await
    }

    /// Prometheus as `prometheus` says (data directory, address), with its remote write receiver.
    pub async fn prometheus_as(prometheus: Prometheus) -> Receiver {
        Receiver { kind: Kind::Prometheus, component: prometheus.remote_write_receiver().start().await }
    }

    /// VictoriaMetrics as `vm` says (data directory, address).
    pub async fn vm(vm: VictoriaMetrics) -> Receiver {
        Receiver { kind: Kind::Vm, component: vm.start().await }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.component.addr()
    }

    /// Its remote write URL.
    pub fn write_url(&self) -> String {
        self.component.url("/api/v1/write")
    }

    /// Stops it with SIGTERM (both flush their data) and waits for the exit.
    pub async fn stop(self) {
        self.component.terminate().await;
    }

    /// Makes what VictoriaMetrics took searchable at once.
    pub async fn flush(&self) {
        if self.kind == Kind::Vm {
            let url = self.component.url("/internal/force_flush");
            let _ = http().get(url).send().await;
        }
    }

    /// The Prometheus query API (both serve it): an instant vector, or a range vector's raw
    /// samples (timestamps in ms).
    pub async fn query(&self, q: &str) -> Vec<(Labels, Vec<(i64, f64)>)> {
        self.flush().await;
        let url = self.component.url("/api/v1/query");
        let Ok(resp) = http().get(url).query(&[("query", q)]).send().await else { return Vec::new() };
        let Ok(text) = resp.text().await else { return Vec::new() };
        let Ok(body) = serde_json::from_str::<serde_json::Value>(&text) else { return Vec::new() };
        let mut out = Vec::new();
        for r in body["data"]["result"].as_array().into_iter().flatten() {
            let labels: Labels = r["metric"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                .collect();
            let pair = |p: &serde_json::Value| {
                let ts = (p[0].as_f64().unwrap() * 1000.0).round() as i64;
                (ts, p[1].as_str().unwrap().parse::<f64>().unwrap())
            };
            let values = match (r.get("value"), r.get("values")) {
                (Some(v), _) => vec![pair(v)],
                (None, Some(vs)) => vs.as_array().unwrap().iter().map(pair).collect(),
                _ => Vec::new(),
            };
            out.push((labels, values));
        }
        out
    }

    /// The one value of an instant query with one answer.
    pub async fn value(&self, q: &str) -> Option<f64> {
        match self.query(q).await.as_slice() {
            [(_, v)] => v.first().map(|x| x.1),
            _ => None,
        }
    }

    /// VictoriaMetrics' raw samples (`/api/v1/export`): per series, (timestamp ms, value).
    pub async fn export(&self, selector: &str) -> Vec<(Labels, Vec<(i64, f64)>)> {
        self.flush().await;
        let url = self.component.url("/api/v1/export");
        let body =
            http().get(url).query(&[("match[]", selector)]).send().await.unwrap().text().await.unwrap();
        body.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                let labels: Labels = v["metric"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, x)| (k.clone(), x.as_str().unwrap().to_owned()))
                    .collect();
                let ts = v["timestamps"].as_array().unwrap().iter().map(|t| t.as_i64().unwrap());
                let vals = v["values"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap_or(f64::NAN));
                (labels, ts.zip(vals).collect())
            })
            .collect()
    }
}

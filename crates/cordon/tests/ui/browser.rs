//! The page in Chromium: a minimal WebDriver client for the tests in `chromium.rs` and
//! `proxied.rs`.

use super::*;

/// A minimal W3C WebDriver client over chromedriver's HTTP port: the handful of commands this
/// test needs (navigate, run a script, click, screenshot). A client crate would bring an HTTP
/// client stack and an async runtime for six JSON requests.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

impl Browser {
    pub fn start() -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // Its own process group, so dropping the driver ends the browser it started too, even
        // when the test fails before the WebDriver session is deleted.
        let driver = Command::new("chromedriver")
            .process_group(0)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let end = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < end, "chromedriver never listened");
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = tempfile::Builder::new()
            .prefix("cordon-ui-chromium")
            .tempdir_in("/var/tmp")
            .unwrap();
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1400,1000",
            &format!("--user-data-dir={}", profile.path().display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args},
        }}});
        let mut b = Browser {
            driver,
            port,
            session: String::new(),
            _profile: profile,
        };
        let v = b.call("POST", "/session", Some(caps));
        b.session = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {v}"))
            .to_string();
        b
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let (status, text) = http(
            self.port,
            method,
            path,
            "Content-Type: application/json\r\n",
            &body,
        );
        let v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("WebDriver {method} {path}: {status} {e}: {text}"));
        assert_eq!(status, 200, "WebDriver {method} {path}: {v}");
        v["value"].clone()
    }

    fn cmd(&self, method: &str, what: &str, body: Option<Value>) -> Value {
        self.call(method, &format!("/session/{}/{what}", self.session), body)
    }

    pub fn goto(&self, url: &str) {
        self.cmd("POST", "url", Some(json!({ "url": url })));
    }

    pub fn js(&self, script: &str) -> Value {
        self.cmd(
            "POST",
            "execute/sync",
            Some(json!({ "script": script, "args": [] })),
        )
    }

    /// Polls `script` until it returns something truthy (not null/false/""/[]).
    pub fn wait_for(&self, what: &str, script: &str, limit: Duration) -> Value {
        let end = Instant::now() + limit;
        loop {
            let v = self.js(script);
            let truthy = !(v.is_null()
                || v == json!(false)
                || v == json!("")
                || v.as_array().is_some_and(|a| a.is_empty()));
            if truthy {
                return v;
            }
            if Instant::now() > end {
                let page = self.js("return document.body.innerText");
                panic!("the page never showed {what}; it shows:\n{page}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn click(&self, element: &Value) {
        let id = element[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("not an element: {element}"));
        self.cmd("POST", &format!("element/{id}/click"), Some(json!({})));
    }

    pub fn screenshot(&self, path: &Path) {
        let b64 = self.cmd("GET", "screenshot", None);
        let png = base64_decode(b64.as_str().expect("base64 PNG"));
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = http(
                self.port,
                "DELETE",
                &format!("/session/{}", self.session),
                "",
                "",
            );
        }
        let _ = Command::new("kill")
            .args(["-KILL", "--"])
            .arg(format!("-{}", self.driver.id()))
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let (mut out, mut acc, mut bits) = (Vec::new(), 0u32, 0);
    for v in s.bytes().filter_map(val) {
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

/// Where the screenshots go: `target/ui-test/`.
pub fn shots() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/ui-test")
}

//! Configuration parsing under arbitrary text: never panics; every refusal
//! renders a message. Run: see fuzz/README.md.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ratelimit::config::Config;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Err(e) = Config::from_toml_str(text) {
            assert!(!e.to_string().is_empty());
        }
        let vars = [("RATELIMIT__PROFILES__A__RATE".to_owned(), text.to_owned())];
        let _ = Config::from_toml_str_with_env("[profiles.a]\nrate = \"1/s\"\n", vars);
    }
});

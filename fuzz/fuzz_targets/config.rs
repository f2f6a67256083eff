//! Fuzzes config loading: `tether::config::parse_file` on arbitrary text (TOML or not), then
//! validation (`File::validate`) of whatever parsed. No input panics; a refusal is a
//! `ConfigError` naming a key.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match tether::config::parse_file(text) {
        Ok(file) => match file.validate() {
            Ok(cfg) => drop(cfg),
            Err(e) => assert!(!e.key.is_empty(), "an error names its key"),
        },
        Err(e) => assert!(!e.key.is_empty(), "an error names its key"),
    }
});

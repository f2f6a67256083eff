use super::*;

fn write_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf, Vec<u8>) {
    let k = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    std::fs::write(&cert, k.cert.pem()).unwrap();
    std::fs::write(&key, k.key_pair.serialize_pem()).unwrap();
    (cert, key, k.cert.der().to_vec())
}

fn served(t: &ListenerTls) -> Vec<u8> {
    t.current.read().cert[0].to_vec()
}

#[test]
fn a_reload_serves_the_new_pair_and_a_bad_one_keeps_the_old() {
    let dir = std::env::temp_dir().join(format!("tether-listener-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key, first) = write_pair(&dir, "a");
    let t = ListenerTls::load(&cert, &key).unwrap();
    assert_eq!(served(&t), first);

    let (c2, k2, second) = write_pair(&dir, "b");
    std::fs::copy(&c2, &cert).unwrap();
    std::fs::copy(&k2, &key).unwrap();
    t.reload().unwrap();
    assert_eq!(served(&t), second);

    // A half-written pair (the new certificate, the old key) is refused: the key does not fit.
    let (c3, _, _) = write_pair(&dir, "c");
    std::fs::copy(&c3, &cert).unwrap();
    let e = t.reload().unwrap_err();
    assert!(e.contains("does not fit"), "{e}");
    std::fs::write(&key, "not a key\n").unwrap();
    let e = t.reload().unwrap_err();
    assert!(e.contains("no PEM private key"), "{e}");
    assert_eq!(served(&t), second);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let missing = Path::new("/nonexistent/tether/tls.crt");
    let e = ListenerTls::load(missing, missing).unwrap_err();
    assert!(e.contains("/nonexistent/tether/tls.crt"), "{e}");
}

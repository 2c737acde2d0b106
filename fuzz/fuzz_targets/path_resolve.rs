//! Request path → file: `gatehouse_layers::path::normalize` and `Resolver::resolve` over a
//! small tree that has symlinks leading out of the root and a secret file beside it.
//!
//! Properties:
//! - a normalised path has only plain segments: no `..`, `.` or empty segment, no NUL, no
//!   backslash, no leading `/`, no dot segment when dotfiles are hidden;
//! - normalising is idempotent (when the result has no `%` that a second decode would read);
//! - the resolver answers `BadRequest` exactly for the paths `normalize` refuses as
//!   malformed, and `NotFound` for the hidden ones;
//! - a resolved file (or listing) lies under the root once symlinks are followed, and its
//!   bytes are never the secret's.
#![no_main]

use gatehouse_layers::open_file_cache::{Resolved, Resolver};
use gatehouse_layers::path::{normalize, NormalPath, PathError};
use libfuzzer_sys::fuzz_target;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

const SECRET: &[u8] = b"SECRET: outside the root, never to be served\n";

struct Fixture {
    canonical_root: PathBuf,
    /// The defaults: dotfiles hidden, no listing, symlinks kept inside.
    strict: Resolver,
    /// Dotfiles shown and directories listed: still never outside the root.
    open: Resolver,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let base = std::env::temp_dir().join(format!("gatehouse-fuzz-path-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("root");
        let outside = base.join("outside");
        let mk = |p: &Path| std::fs::create_dir_all(p).unwrap();
        let put = |p: &Path, b: &[u8]| std::fs::write(p, b).unwrap();
        let link = |target: &str, p: &Path| std::os::unix::fs::symlink(target, p).unwrap();
        mk(&root.join("a/b"));
        mk(&root.join("dir"));
        mk(&root.join("empty"));
        mk(&root.join(".hidden"));
        mk(&outside);
        put(&outside.join("secret.txt"), SECRET);
        put(&outside.join("index.html"), SECRET);
        put(&root.join("index.html"), b"<h1>home</h1>\n");
        put(&root.join("a/b/c.txt"), b"c\n");
        put(&root.join("a/x y.txt"), b"x y\n");
        put(&root.join("a/%2e%2e"), b"a file named %2e%2e\n");
        put(&root.join("dir/index.html"), b"dir index\n");
        put(&root.join(".env"), b"TOKEN=inside-but-hidden\n");
        put(&root.join(".hidden/f"), b"hidden f\n");
        // Out of the root, by relative and absolute links, to a file and to directories.
        link("../outside/secret.txt", &root.join("leak.txt"));
        link("../outside", &root.join("out"));
        link("../..", &root.join("a/up"));
        link(outside.to_str().unwrap(), &root.join("abs"));
        // Inside the root: allowed.
        link("a/b", &root.join("inlink"));
        let canonical_root = root.canonicalize().unwrap();
        Fixture {
            canonical_root,
            strict: Resolver::new(&root).unwrap(),
            open: Resolver::new(&root)
                .unwrap()
                .hide_dotfiles(false)
                .listing(true),
        }
    })
}

fn check_normal(raw: &str, hide: bool, n: &NormalPath) {
    let rel = &n.relative;
    assert!(!rel.starts_with('/'), "{raw:?} → absolute {rel:?}");
    assert!(!rel.contains('\0'), "{raw:?} → NUL in {rel:?}");
    assert!(!rel.contains('\\'), "{raw:?} → backslash in {rel:?}");
    if rel.is_empty() {
        assert!(n.trailing_slash, "{raw:?}: the root is a directory");
    } else {
        for seg in rel.split('/') {
            assert!(
                !seg.is_empty() && seg != "." && seg != "..",
                "{raw:?} → segment {seg:?} in {rel:?}"
            );
            assert!(!(hide && seg.starts_with('.')), "{raw:?} → hidden {seg:?}");
        }
        assert!(
            Path::new(rel)
                .components()
                .all(|c| matches!(c, Component::Normal(_))),
            "{raw:?} → {rel:?} has a component that is not a plain name"
        );
    }
    let abs = n.to_absolute();
    assert!(abs.starts_with('/'));
    if !rel.contains('%') {
        assert_eq!(
            normalize(&abs, hide).as_ref(),
            Ok(n),
            "{raw:?}: normalising {abs:?} again changed it"
        );
    }
}

fn check_resolved(f: &Fixture, raw: &str, r: &Resolved) {
    let Resolved::File(entry) = r else { return };
    let real = entry
        .path
        .canonicalize()
        .unwrap_or_else(|e| panic!("{raw:?} → {:?}, which is gone: {e}", entry.path));
    assert!(
        real.starts_with(&f.canonical_root),
        "{raw:?} → {real:?}, outside the root"
    );
    if let Some(body) = &entry.body {
        assert!(
            !body.windows(SECRET.len()).any(|w| w == SECRET),
            "{raw:?} served the secret"
        );
        assert!(
            !body.windows(10).any(|w| w == b"secret.txt"),
            "{raw:?}: a listing named a file outside the root"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    let f = fixture();

    let hidden = normalize(raw, true);
    let shown = normalize(raw, false);
    match (&hidden, &shown) {
        (Ok(h), Ok(s)) => {
            assert_eq!(h, s, "{raw:?}: hiding dotfiles changed a path with none");
            check_normal(raw, true, h);
        }
        (Err(PathError::Hidden), Ok(s)) => {
            assert!(s.relative.split('/').any(|seg| seg.starts_with('.')));
        }
        (Err(a), Err(b)) => {
            assert_eq!(a, b, "{raw:?}");
            assert_ne!(*a, PathError::Hidden);
        }
        (a, b) => panic!("{raw:?}: hidden {a:?}, shown {b:?}"),
    }
    if let Ok(s) = &shown {
        check_normal(raw, false, s);
    }

    // The resolver reaches the file system: keep to inputs a request line could carry.
    if raw.len() > 256 {
        return;
    }
    let strict = f.strict.resolve(raw);
    match &hidden {
        Err(PathError::Hidden) => assert!(matches!(strict, Resolved::NotFound), "{raw:?}"),
        Err(_) => assert!(matches!(strict, Resolved::BadRequest), "{raw:?}"),
        Ok(_) => assert!(!matches!(strict, Resolved::BadRequest), "{raw:?}"),
    }
    check_resolved(f, raw, &strict);

    let open = f.open.resolve(raw);
    assert_eq!(
        matches!(open, Resolved::BadRequest),
        shown.is_err(),
        "{raw:?}: {open:?}"
    );
    check_resolved(f, raw, &open);
});

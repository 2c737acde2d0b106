//! The open-file cache as a library: bounds, single-flight loads, validity, and the layer
//! mounted over a plain axum handler.
use axum::{extract::Extension, routing::get, Router};
use gatehouse_layers::open_file_cache::{
    CacheOptions, FileCache, OpenFileCacheLayer, Resolved, Resolver,
};
use http_body_util::BodyExt;
use std::time::Duration;
use tower::ServiceExt;

fn dir_with(files: &[(&str, usize)]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for (name, size) in files {
        std::fs::write(d.path().join(name), vec![b'x'; *size]).unwrap();
    }
    d
}

/// Descriptors of this process open on `file`, deleted or not (other tests run beside the
/// caller, on files of their own).
fn open_on(file: &std::path::Path) -> usize {
    let deleted = format!("{} (deleted)", file.display());
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|t| t == file || t.to_string_lossy() == deleted)
        .count()
}

#[tokio::test]
async fn the_byte_budget_is_respected_and_eviction_works() {
    let names: Vec<String> = (0..50).map(|i| format!("f{i}.bin")).collect();
    let files: Vec<(&str, usize)> = names.iter().map(|n| (n.as_str(), 10_000)).collect();
    let d = dir_with(&files);
    let cache = FileCache::new(
        Resolver::new(d.path()).unwrap(),
        CacheOptions {
            max_entries: 1000,
            max_bytes: 100_000,
            ..CacheOptions::default()
        },
    );
    for n in &names {
        match cache.get(&format!("/{n}")).await {
            Resolved::File(f) => assert_eq!(f.body.as_ref().unwrap().len(), 10_000),
            other => panic!("{other:?}"),
        }
        assert!(
            cache.weight() <= 100_000,
            "weight {} over budget",
            cache.weight()
        );
    }
    assert!(cache.len() < 50, "entries were evicted: {}", cache.len());
    assert!(cache.len() >= 5, "but the budget is used: {}", cache.len());
}

#[tokio::test]
async fn the_entry_count_is_bounded() {
    let names: Vec<String> = (0..200).map(|i| format!("s{i}.txt")).collect();
    let files: Vec<(&str, usize)> = names.iter().map(|n| (n.as_str(), 10)).collect();
    let d = dir_with(&files);
    let cache = FileCache::new(
        Resolver::new(d.path()).unwrap(),
        CacheOptions {
            max_entries: 20,
            max_bytes: 1 << 30,
            ..CacheOptions::default()
        },
    );
    for n in &names {
        cache.get(&format!("/{n}")).await;
        assert!(cache.len() <= 20, "{} entries", cache.len());
    }
    // Not-found answers count against the same bound.
    for i in 0..100 {
        assert!(matches!(
            cache.get(&format!("/missing{i}")).await,
            Resolved::NotFound
        ));
    }
    assert!(cache.len() <= 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_misses_resolve_once() {
    let d = dir_with(&[("one.txt", 100)]);
    let cache = FileCache::new(Resolver::new(d.path()).unwrap(), CacheOptions::default());
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let c = cache.clone();
            tokio::spawn(async move { matches!(c.get("/one.txt").await, Resolved::File(_)) })
        })
        .collect();
    for t in tasks {
        assert!(t.await.unwrap());
    }
    assert_eq!(
        cache.loads(),
        1,
        "one resolution for 100 concurrent requests"
    );
    // Hits don't load again.
    cache.get("/one.txt").await;
    assert_eq!(cache.loads(), 1);
}

#[tokio::test]
async fn strict_and_relaxed_validity() {
    let d = dir_with(&[("v.txt", 3)]);
    let strict = FileCache::new(Resolver::new(d.path()).unwrap(), CacheOptions::default());
    let relaxed = FileCache::new(
        Resolver::new(d.path()).unwrap(),
        CacheOptions {
            strict: false,
            valid: Duration::from_millis(300),
            ..CacheOptions::default()
        },
    );
    strict.get("/v.txt").await;
    relaxed.get("/v.txt").await;
    std::fs::write(d.path().join("v.txt"), b"12345").unwrap();
    let len = |r: Resolved| match r {
        Resolved::File(f) => f.len,
        other => panic!("{other:?}"),
    };
    assert_eq!(len(strict.get("/v.txt").await), 5);
    assert_eq!(len(relaxed.get("/v.txt").await), 3);
    assert!(relaxed.lookup("/v.txt").is_some(), "a hit within valid");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        relaxed.lookup("/v.txt").is_none(),
        "a stale entry is dropped"
    );
    assert_eq!(len(relaxed.get("/v.txt").await), 5);
}

#[tokio::test]
async fn strict_checks_the_open_file_every_time_and_its_path_once_a_second() {
    let d = dir_with(&[("b.txt", 2)]);
    std::fs::create_dir(d.path().join("rel")).unwrap();
    std::fs::write(d.path().join("rel/a.txt"), b"one").unwrap();
    let cache = FileCache::new(
        Resolver::new(d.path()).unwrap(),
        CacheOptions {
            // Longer than the one second strict mode trusts a path for at most.
            valid: Duration::from_secs(600),
            ..CacheOptions::default()
        },
    );
    let len = |r: Resolved| match r {
        Resolved::File(f) => f.len,
        other => panic!("{other:?}"),
    };
    assert_eq!(len(cache.get("/b.txt").await), 2);
    // Through the open descriptor, at once: an edit in place, a replacement by rename (the
    // old file is unlinked), a deletion.
    std::fs::write(d.path().join("b.txt"), b"bbbb").unwrap();
    assert_eq!(len(cache.get("/b.txt").await), 4);
    // The same length, so only the mtime tells.
    let etag = |r: Resolved| match r {
        Resolved::File(f) => f.etag.clone(),
        other => panic!("{other:?}"),
    };
    let before = etag(cache.get("/b.txt").await);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(d.path().join("b.txt"))
        .unwrap();
    f.set_modified(std::time::SystemTime::now() + Duration::from_secs(5))
        .unwrap();
    drop(f);
    assert_ne!(etag(cache.get("/b.txt").await), before, "a new mtime");
    std::fs::write(d.path().join("tmp"), b"bbbbbb").unwrap();
    std::fs::rename(d.path().join("tmp"), d.path().join("b.txt")).unwrap();
    assert_eq!(len(cache.get("/b.txt").await), 6);
    std::fs::remove_file(d.path().join("b.txt")).unwrap();
    assert!(matches!(cache.get("/b.txt").await, Resolved::NotFound));
    // A directory on the way swapped for another: the old file is still linked and
    // unchanged, so only the path's own check, once a second, sees the new one.
    assert_eq!(len(cache.get("/rel/a.txt").await), 3);
    std::fs::rename(d.path().join("rel"), d.path().join("rel.old")).unwrap();
    std::fs::create_dir(d.path().join("rel")).unwrap();
    std::fs::write(d.path().join("rel/a.txt"), b"twotwo").unwrap();
    assert_eq!(len(cache.get("/rel/a.txt").await), 3, "within the second");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(len(cache.get("/rel/a.txt").await), 6, "after a second");
}

#[tokio::test]
async fn relaxed_mode_keeps_no_descriptor_open() {
    let d = dir_with(&[("small.txt", 10)]);
    let file = d.path().join("small.txt");
    let open_fds = || open_on(&file);
    let relaxed = FileCache::new(
        Resolver::new(d.path()).unwrap(),
        CacheOptions {
            strict: false,
            ..CacheOptions::default()
        },
    );
    let strict = FileCache::new(Resolver::new(d.path()).unwrap(), CacheOptions::default());
    relaxed.get("/small.txt").await;
    assert_eq!(
        open_fds(),
        0,
        "relaxed: the body is in memory, the file closed"
    );
    strict.get("/small.txt").await;
    assert_eq!(open_fds(), 1, "strict: kept open for its fstat");
    drop(strict);
    assert_eq!(open_fds(), 0, "and closed with the cache");
}

/// Like nginx's `open_file_cache inactive=`: an entry not requested for `inactive` goes,
/// with no request to notice, and its descriptor (a deleted file's disk space) with it; an
/// entry requested all along stays.
#[tokio::test]
async fn inactive_entries_go_and_close_their_files() {
    let d = dir_with(&[("cold.txt", 10), ("hot.txt", 10)]);
    let cold = d.path().join("cold.txt");
    let held = || open_on(&cold);
    // A cache swept every 15 s first, so that the sweeper is asleep until then: the next
    // one's registration must wake it.
    let _slow = FileCache::new(
        Resolver::new(d.path()).unwrap(),
        CacheOptions {
            inactive: Duration::from_secs(60),
            ..CacheOptions::default()
        },
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cache = FileCache::new(
        Resolver::new(d.path()).unwrap(),
        CacheOptions {
            inactive: Duration::from_secs(1),
            ..CacheOptions::default()
        },
    );
    cache.get("/cold.txt").await;
    cache.get("/hot.txt").await;
    // A hit: this thread keeps a copy of its own, which must go with the entry.
    assert!(cache.lookup("/cold.txt").is_some());
    assert_eq!(held(), 1);
    std::fs::remove_file(&cold).unwrap();
    assert_eq!(held(), 1, "the deleted file is still open");
    let loads = cache.loads();
    let t = std::time::Instant::now();
    while t.elapsed() < Duration::from_millis(2500) {
        assert!(cache.lookup("/hot.txt").is_some(), "a hot entry stays");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(held(), 0, "closed once inactive");
    assert_eq!(cache.len(), 1, "only the hot entry is left");
    assert_eq!(cache.expired(), 1);
    assert_eq!(cache.evictions(), 0, "expiry is not eviction");
    assert_eq!(cache.loads(), loads);

    // Zero keeps entries.
    let keep = FileCache::new(
        Resolver::new(d.path()).unwrap(),
        CacheOptions {
            inactive: Duration::ZERO,
            ..CacheOptions::default()
        },
    );
    keep.get("/hot.txt").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(keep.len(), 1);
}

#[tokio::test]
async fn the_layer_over_a_plain_axum_handler() {
    let d = dir_with(&[("page.html", 42)]);
    let cache = FileCache::new(Resolver::new(d.path()).unwrap(), CacheOptions::default());
    async fn describe(Extension(found): Extension<Resolved>) -> String {
        match found {
            Resolved::File(f) => format!("{} {}", f.len, f.content_type.to_str().unwrap()),
            Resolved::NotFound => "missing".into(),
            Resolved::AddSlash => "add slash".into(),
            other => format!("{other:?}"),
        }
    }
    let app: Router = Router::new()
        .fallback(get(describe))
        .layer(OpenFileCacheLayer::new(cache.clone()));
    let body = |path: &'static str| {
        let app = app.clone();
        async move {
            let res = app
                .oneshot(
                    http::Request::get(path)
                        .body(axum::body::Body::empty())
                        .unwrap(),
                )
                .await
                .unwrap();
            String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
        }
    };
    assert_eq!(body("/page.html").await, "42 text/html; charset=utf-8");
    assert_eq!(body("/nothing").await, "missing");
    assert_eq!(body("/../page.html").await, "42 text/html; charset=utf-8");
    assert_eq!(cache.len(), 3);
}

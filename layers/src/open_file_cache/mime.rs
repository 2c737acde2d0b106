use http::HeaderValue;
use std::path::Path;

/// `Content-Type` from the file extension, with `charset=utf-8` on text types.
pub fn content_type(path: &Path) -> HeaderValue {
    let Some(mime) = mime_guess::from_path(path).first_raw() else {
        return HeaderValue::from_static("application/octet-stream");
    };
    let texty = mime.starts_with("text/")
        || matches!(
            mime,
            "application/javascript"
                | "application/json"
                | "application/xml"
                | "image/svg+xml"
                | "application/manifest+json"
                | "application/ld+json"
        );
    if texty {
        HeaderValue::from_str(&format!("{mime}; charset=utf-8"))
            .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"))
    } else {
        HeaderValue::from_static(mime)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_types_carry_utf8() {
        assert_eq!(
            content_type(Path::new("a.html")),
            "text/html; charset=utf-8"
        );
        assert_eq!(
            content_type(Path::new("a.js")),
            "text/javascript; charset=utf-8"
        );
        assert_eq!(
            content_type(Path::new("a.json")),
            "application/json; charset=utf-8"
        );
        assert_eq!(content_type(Path::new("a.png")), "image/png");
        assert_eq!(content_type(Path::new("noext")), "application/octet-stream");
    }
}

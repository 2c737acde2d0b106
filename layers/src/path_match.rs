//! Which paths a redirect or rewrite applies to: all, one exactly, a prefix on whole
//! segments, or a regex (the `regex` crate, compiled once when the rule is made).

/// A path match.
#[derive(Clone, Debug)]
pub enum PathMatch {
    /// Every path.
    Any,
    /// This path only.
    Exact(String),
    /// This path and those under it, on whole segments (`/old` matches `/old` and
    /// `/old/x`, not `/older`); `$1` is the rest (`/x`, or empty).
    Prefix(String),
    /// A regex over the path; `$1`…`$9` are its groups.
    Regex(regex::Regex),
}

impl PathMatch {
    /// A regex match, compiled now.
    pub fn regex(re: &str) -> Result<PathMatch, regex::Error> {
        regex::Regex::new(re).map(PathMatch::Regex)
    }

    /// Whether `path` matches, with no captures made.
    pub fn is_match(&self, path: &str) -> bool {
        match self {
            PathMatch::Any => true,
            PathMatch::Exact(p) => p == path,
            PathMatch::Prefix(p) => {
                let p = p.trim_end_matches('/');
                path.strip_prefix(p)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            }
            PathMatch::Regex(re) => re.is_match(path),
        }
    }

    /// The captures if `path` matches: `[0]` is the whole match.
    pub fn captures<'p>(&self, path: &'p str) -> Option<Vec<Option<&'p str>>> {
        match self {
            PathMatch::Any => Some(vec![Some(path)]),
            PathMatch::Exact(p) => (p == path).then(|| vec![Some(path)]),
            PathMatch::Prefix(p) => {
                let p = p.trim_end_matches('/');
                let rest = path.strip_prefix(p)?;
                (rest.is_empty() || rest.starts_with('/')).then(|| vec![Some(path), Some(rest)])
            }
            PathMatch::Regex(re) => {
                let c = re.captures(path)?;
                Some(c.iter().take(10).map(|m| m.map(|m| m.as_str())).collect())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_matches_and_captures() {
        let prefix = PathMatch::Prefix("/old/".into());
        assert_eq!(prefix.captures("/old/a/b").unwrap()[1], Some("/a/b"));
        assert_eq!(prefix.captures("/old").unwrap()[1], Some(""));
        assert!(prefix.captures("/older").is_none());
        let exact = PathMatch::Exact("/a".into());
        assert!(exact.captures("/a").is_some());
        assert!(exact.captures("/a/").is_none());
        let re = PathMatch::regex(r"^/blog/(\d+)/(.*)$").unwrap();
        let c = re.captures("/blog/12/x").unwrap();
        assert_eq!(&c[1..], [Some("12"), Some("x")]);
        assert!(re.captures("/blog/x/").is_none());
        assert!(PathMatch::regex("(").is_err());
    }
}

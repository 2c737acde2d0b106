use super::{AcmeChallenge, ChallengeTokens};
use tower_layer::Layer;

/// Wraps a Service in [`AcmeChallenge`].
#[derive(Clone, Debug)]
pub struct AcmeChallengeLayer {
    tokens: ChallengeTokens,
}

impl AcmeChallengeLayer {
    /// A layer answering the challenges that `tokens` holds.
    pub fn new(tokens: ChallengeTokens) -> Self {
        AcmeChallengeLayer { tokens }
    }
}

impl<S> Layer<S> for AcmeChallengeLayer {
    type Service = AcmeChallenge<S>;

    fn layer(&self, inner: S) -> AcmeChallenge<S> {
        AcmeChallenge::new(inner, self.tokens.clone())
    }
}

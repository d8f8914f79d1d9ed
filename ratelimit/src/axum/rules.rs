//! The resolver chain of a `[[rules]]` entry, walked from its spec.

use crate::config::ResolverSpec;
use crate::resolve::{ConfiguredService, DefaultProfile, FinalResolver, JwtTier, ResolveContext, Resolved, Resolver};

/// A configured chain; it ends with `default` (checked when the
/// configuration is loaded), and answers with the default profile anyway.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RuleChain<'a>(pub(crate) &'a [ResolverSpec]);

impl RuleChain<'_> {
    pub(crate) fn wants_claims(&self) -> bool {
        self.0.contains(&ResolverSpec::Jwt)
    }
    pub(crate) fn wants_service(&self) -> bool {
        self.0.contains(&ResolverSpec::Service)
    }
}

impl FinalResolver for RuleChain<'_> {
    fn resolve_final(&self, ctx: &ResolveContext<'_>) -> Resolved {
        for step in self.0 {
            let answer = match step {
                ResolverSpec::Jwt => JwtTier.resolve(ctx),
                ResolverSpec::Service => ConfiguredService.resolve(ctx),
                ResolverSpec::Profile(name) => ctx.profile(name),
                _ => None,
            };
            if let Some(found) = answer {
                return found;
            }
        }
        DefaultProfile.resolve_final(ctx)
    }
}

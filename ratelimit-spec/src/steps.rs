//! How much: the steps of a resolver chain, their table, and the shape a
//! chain must have.

use crate::error::{Error, ErrorKind};
use crate::vocabulary::{Step, STEPS};

/// A step from its name and argument: `("jwt", None)`,
/// `("profile", Some("standard"))`.
pub fn step(name: &str, arg: Option<&str>) -> Result<Step, Error> {
    let Some(&(fixed, takes)) = STEPS.iter().find(|(s, _)| *s == name) else {
        return Err(Error::new(ErrorKind::UnknownStep(name.to_owned())));
    };
    match (fixed, arg) {
        (_, Some(_)) if !takes => Err(Error::new(ErrorKind::StepTakesNoArgument(fixed))),
        (_, None) if takes => Err(Error::new(ErrorKind::ProfileNeedsName)),
        (_, Some(p)) if p.trim().is_empty() => Err(Error::new(ErrorKind::EmptyProfileName)),
        (_, Some(p)) => Ok(Step::Profile(p.to_owned())),
        ("jwt", None) => Ok(Step::Jwt),
        ("service", None) => Ok(Step::Service),
        _ => Ok(Step::Default),
    }
}

/// Whether a step takes an argument; `None` when there is no such step.
pub fn step_takes_argument(name: &str) -> Option<bool> {
    STEPS.iter().find(|(s, _)| *s == name).map(|&(_, takes)| takes)
}

/// A step as the configuration writes it: `"jwt"`, `"profile:standard"`.
pub fn step_text(text: &str) -> Result<Step, Error> {
    match text.split_once(':') {
        Some((name, arg)) => step(name, Some(arg)),
        None => step(text, None),
    }
}

/// Every problem with the shape of a chain, each with the index of the step
/// it is about: listed twice, `default` before the end, and (when the steps
/// are otherwise fine) no `default` at the end. Empty when the chain is
/// valid.
pub fn check_chain(steps: &[Step]) -> Vec<(usize, Error)> {
    let steps: Vec<Option<&Step>> = steps.iter().map(Some).collect();
    check_partial_chain(&steps)
}

/// [`check_chain`] for a list some of whose steps did not parse (`None`):
/// positions stay those of the list as written, and a list with an
/// unparsed step is not also said to lack `default` or to be empty.
pub fn check_partial_chain(steps: &[Option<&Step>]) -> Vec<(usize, Error)> {
    if steps.is_empty() {
        return vec![(0, Error::new(ErrorKind::EmptyChain))];
    }
    let mut problems = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let Some(s) = s else { continue };
        if steps[..i].contains(&Some(s)) {
            problems.push((i, Error::new(ErrorKind::DuplicateStep((*s).clone()))));
        } else if **s == Step::Default && i + 1 != steps.len() {
            problems.push((i, Error::new(ErrorKind::DefaultNotLast)));
        }
    }
    let complete = steps.iter().all(Option::is_some);
    if complete && problems.is_empty() && steps.last() != Some(&Some(&Step::Default)) {
        problems.push((steps.len() - 1, Error::new(ErrorKind::MissingDefault)));
    }
    problems
}

/// The steps of a chain that can answer a request: every step up to and
/// including the first that always answers. `default` always answers, and
/// so does `profile("name")` once the configuration defines the profile
/// (startup and every reload refuse a chain that names a missing one):
/// nothing after either is ever reached. `jwt` and `service` may pass.
///
/// ```
/// use ratelimit_spec::{reachable, step_text, Step};
///
/// let chain = ["jwt", "profile:c", "default"].map(|s| step_text(s).unwrap());
/// assert_eq!(reachable(&chain), &chain[..2], "default is never reached");
/// assert_eq!(reachable(&[Step::Service, Step::Default]).len(), 2);
/// ```
pub fn reachable(steps: &[Step]) -> &[Step] {
    match steps.iter().position(|s| matches!(s, Step::Profile(_) | Step::Default)) {
        Some(last) => &steps[..=last],
        None => steps,
    }
}

/// An empty step list (for surfaces that parse steps one by one and find
/// none usable).
pub fn empty_chain() -> Error {
    Error::new(ErrorKind::EmptyChain)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_and_chains() {
        let chain = |v: &[&str]| v.iter().map(|s| step_text(s)).collect::<Result<Vec<_>, _>>();
        assert!(check_chain(&chain(&["jwt", "profile:a", "default"]).unwrap()).is_empty());
        assert!(check_chain(&[]).len() == 1);
        assert_eq!(check_chain(&chain(&["default", "jwt"]).unwrap())[0].0, 0);
        assert_eq!(check_chain(&chain(&["jwt", "jwt", "default"]).unwrap())[0].0, 1);
        assert_eq!(check_chain(&chain(&["jwt"]).unwrap())[0].0, 0);
        assert!(chain(&["profile:", "default"]).is_err());
        assert!(chain(&["profile: ", "default"]).is_err());
        assert!(chain(&["profile", "default"]).is_err());
        assert!(chain(&["jwt:x", "default"]).is_err());
        assert_eq!(step_text("profile:a:b"), Ok(Step::Profile("a:b".into())));
    }
}

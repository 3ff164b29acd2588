//! Drawing case `index` of a run (R-CNF-26): a request made by [`super::cases`], spoiled by its
//! family ([`spoil`]).

use proptest::prelude::RngExt as _;

use super::cases::{
    Case, Family, METHODS, Session, Verb, message, rng_of, standard_headers, wrong_type,
};
use super::spoil;

/// Case `index` of the run with `seed`.
pub fn case(seed: u64, index: u64) -> Case {
    let mut rng = rng_of(seed, index);
    let family = Family::ALL[rng.random_range(0..Family::ALL.len())];
    let method = METHODS[rng.random_range(0..METHODS.len())];
    let modern = rng.random_bool(0.6);
    let message = message(&mut rng, method, index, modern);
    let mut case = Case {
        index,
        family,
        method: method.to_owned(),
        verb: Verb::Post,
        headers: standard_headers(&message, modern),
        session: if modern || method == "initialize" {
            Session::None
        } else {
            Session::Own
        },
        body: Vec::new(),
    };
    case.body = match family {
        Family::Methods | Family::OddHeaders => message.to_string().into_bytes(),
        Family::WrongTypes => wrong_type(&mut rng, message).to_string().into_bytes(),
        Family::BrokenNesting => spoil::broken(&mut rng, &message),
        Family::BadUtf8 => spoil::bad_utf8(&mut rng, &message),
        Family::Oversize => spoil::oversize(&mut rng, message),
    };
    if family == Family::OddHeaders {
        spoil::odd_headers(&mut rng, &mut case);
    }
    case
}

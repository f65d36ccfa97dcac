//! Unit tests of the pure parts of the engine (matchers, status forms, body maps,
//! cross-step assertions) and a dry pass over the real suite.

mod assertions;
mod expect;
mod matchers;
mod suite;

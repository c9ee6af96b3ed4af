//! Response body tee (stub).

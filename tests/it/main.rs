//! Every integration test of conelab in one binary: one link against burn and polars instead of
//! one per file. Each module is one former `tests/*.rs` file; `harness` holds their helpers.
//! `cargo test --test it -- MODULE::` runs one of them.

mod harness;

mod architecture;
mod attach_e2e;
mod bleu;
mod chaos;
mod checkpoints;
mod cli_data;
mod cli_inspect;
mod cli_train;
mod damage;
mod engine;
mod history;
mod integrity;
mod metrics;
mod objectives;
mod objectives_engine;
mod outputs;
mod protocol;
mod readme;
mod real_corpora;
mod refusals;
mod run_index;
mod run_process;
mod store;
mod store_export;
mod store_python;
mod store_training;
mod sweep;
mod synthetic;
mod tch;
mod tensorboard;
mod transports;
mod tui_e2e;

// The scheduler stub of examples/c/scheduler.c in Rust, through libtrainscape's C ABI (no
// bindgen, no crates). The sizes and column indices below are those of trainscape_layout.h for
// the layout whose hash is LAYOUT_HASH; the program refuses a library built for another one.
//
//   trainscape pack examples/llama3-405b-2bldg.toml --out job.tsp --candidates
//   rustc -O scheduler.rs -L $(pkg-config --variable=libdir trainscape) -l trainscape
//   LD_LIBRARY_PATH=$(pkg-config --variable=libdir trainscape) ./scheduler job.tsp 4096 8192
use std::ffi::CString;
use std::os::raw::{c_char, c_int};

const ABI_VERSION: c_int = 2; // TS_ABI_VERSION
const LAYOUT_HASH: u32 = 0xF249_49E9; // TS_LAYOUT_HASH
const N_CFG: usize = 14; // TS_N_CFG: tp cp pp dp ep mbs vpp schedule recompute zero sp order ...
const N_OUT: usize = 28; // TS_N_OUT
const OUT_STEP_TIME_S: i32 = 2; // TS_OUT_STEP_TIME_S
const BEST_N_STATS: usize = 5; // TS_BEST_N_STATS

#[repr(C)]
struct TsBlocks {
    _opaque: [u8; 0],
}

#[link(name = "trainscape")]
extern "C" {
    fn ts_abi_version() -> c_int;
    fn ts_layout_hash() -> u32;
    fn ts_blocks_load(path: *const c_char, out: *mut *mut TsBlocks) -> c_int;
    fn ts_blocks_free(b: *mut TsBlocks);
    fn ts_blocks_best(b: *const TsBlocks, gpus: i64, objective: i32, cfg_out: *mut i32,
                      out: *mut f64, stats: *mut i64) -> c_int;
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: {} PACKFILE GPUS...", args[0]);
        std::process::exit(2);
    }
    unsafe {
        if ts_abi_version() != ABI_VERSION || ts_layout_hash() != LAYOUT_HASH {
            eprintln!("libtrainscape was built for another ABI or layout");
            std::process::exit(1);
        }
        let path = CString::new(args[1].clone()).unwrap();
        let mut blocks: *mut TsBlocks = std::ptr::null_mut();
        let code = ts_blocks_load(path.as_ptr(), &mut blocks);
        if code != 0 {
            eprintln!("{}: ts_blocks_load failed with code {}", args[1], code);
            std::process::exit(1);
        }
        for a in &args[2..] {
            let gpus: i64 = a.parse().expect("GPUS must be integers");
            let (mut cfg, mut out, mut stats) = ([0i32; N_CFG], [0f64; N_OUT], [0i64; BEST_N_STATS]);
            let code = ts_blocks_best(blocks, gpus, OUT_STEP_TIME_S, cfg.as_mut_ptr(),
                                      out.as_mut_ptr(), stats.as_mut_ptr());
            match code {
                0 => println!("gpus={} tp={} cp={} pp={} dp={} step_time_s={:.6} candidates={}",
                              gpus, cfg[0], cfg[1], cfg[2], cfg[3], out[OUT_STEP_TIME_S as usize],
                              stats[0]),
                1 => println!("gpus={} none: no feasible layout", gpus),
                _ => println!("gpus={} error {}", gpus, code),
            }
        }
        ts_blocks_free(blocks);
    }
}

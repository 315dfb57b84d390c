//! The run's GPU as the driver reports it (NVML: utilisation, memory, power, temperature), for the
//! system sample. NVML is loaded at run time: a CPU run, or a machine without the driver's
//! library, has no GPU sample and needs nothing installed.

use conelab_core::events::GpuStats;
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;

/// One CUDA device, opened through NVML.
pub struct GpuSampler {
    nvml: Nvml,
    /// What finds the device again at each sample (an NVML `Device` borrows `nvml`).
    which: Which,
}

#[derive(Debug, Clone, PartialEq)]
enum Which {
    Index(u32),
    Uuid(String),
}

impl GpuSampler {
    /// The sampler of `device` (`cuda`, `cuda:N`), or none: not a CUDA device, no NVML library,
    /// or no such device.
    pub fn open(device: &str) -> Option<Self> {
        let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        let which = nvml_device(device, visible.as_deref())?;
        let nvml = Nvml::init().ok()?;
        if matches!(which, Which::Index(_))
            && std::env::var("CUDA_DEVICE_ORDER").as_deref() != Ok("PCI_BUS_ID")
            && !one_model(&nvml)
        {
            // CUDA numbers the devices fastest first, NVML by PCI bus: with one model they agree,
            // with mixed models an index could name another card. No sample beats a wrong one.
            return None;
        }
        let sampler = Self { nvml, which };
        sampler.sample().map(|_| sampler)
    }

    /// The device's numbers now; none if NVML cannot read them.
    pub fn sample(&self) -> Option<GpuStats> {
        let device = match &self.which {
            Which::Index(i) => self.nvml.device_by_index(*i),
            Which::Uuid(u) => self.nvml.device_by_uuid(u.as_str()),
        }
        .ok()?;
        let memory = device.memory_info().ok()?;
        Some(GpuStats {
            util_percent: device
                .utilization_rates()
                .map_or(f64::NAN, |u| f64::from(u.gpu)),
            mem_used_bytes: memory.used,
            mem_total_bytes: memory.total,
            // NVML gives milliwatts; not every board reports power.
            power_watts: device
                .power_usage()
                .map_or(f64::NAN, |mw| f64::from(mw) / 1000.0),
            temp_c: device
                .temperature(TemperatureSensor::Gpu)
                .map_or(f64::NAN, f64::from),
        })
    }
}

/// Whether every device NVML sees is the same model.
fn one_model(nvml: &Nvml) -> bool {
    let Ok(count) = nvml.device_count() else {
        return false;
    };
    let names: Vec<String> = (0..count)
        .filter_map(|i| nvml.device_by_index(i).ok()?.name().ok())
        .collect();
    names.len() == count as usize && names.windows(2).all(|w| w[0] == w[1])
}

/// The NVML device behind CUDA device `device`: CUDA numbers the devices that
/// `CUDA_VISIBLE_DEVICES` lists (by index or by UUID), NVML all of them.
fn nvml_device(device: &str, visible: Option<&str>) -> Option<Which> {
    let rest = device.strip_prefix("cuda")?;
    let cuda: usize = match rest.strip_prefix(':') {
        Some(n) => n.parse().ok()?,
        None if rest.is_empty() => 0,
        None => return None,
    };
    let Some(list) = visible.map(str::trim).filter(|v| !v.is_empty()) else {
        return u32::try_from(cuda).ok().map(Which::Index);
    };
    let entry = list.split(',').map(str::trim).nth(cuda)?;
    match entry.parse::<u32>() {
        Ok(i) => Some(Which::Index(i)),
        Err(_) if entry.starts_with("GPU-") || entry.starts_with("MIG-") => {
            Some(Which::Uuid(entry.to_string()))
        }
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_devices_map_to_nvml_through_cuda_visible_devices() {
        let w = |d: &str, v: Option<&str>| nvml_device(d, v);
        assert_eq!(w("cpu", None), None);
        assert_eq!(w("cuda", None), Some(Which::Index(0)));
        assert_eq!(w("cuda:2", None), Some(Which::Index(2)));
        assert_eq!(w("cuda:1", Some("3,5")), Some(Which::Index(5)));
        assert_eq!(w("cuda:2", Some("3,5")), None, "not visible");
        assert_eq!(
            w("cuda:0", Some("GPU-8c1f,1")),
            Some(Which::Uuid("GPU-8c1f".into()))
        );
        assert_eq!(w("cuda:0", Some("")), Some(Which::Index(0)));
        assert_eq!(w("cudax", None), None);
        assert_eq!(w("cuda:x", None), None);
    }

    /// This machine has no NVIDIA driver: no sampler, and nothing fails. (On a GPU machine the
    /// sampler opens and reads a total memory.)
    #[test]
    fn without_the_driver_there_is_no_gpu_sample_and_no_error() {
        match GpuSampler::open("cuda:0") {
            None => assert!(
                Nvml::init().is_err(),
                "NVML loads here, yet device 0 gave no sample"
            ),
            Some(s) => {
                let sample = s.sample().expect("a sample");
                assert!(sample.mem_total_bytes > 0);
            }
        }
        assert!(GpuSampler::open("cpu").is_none());
    }
}

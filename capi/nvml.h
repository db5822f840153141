// libgocl's own NVML reader: libnvidia-ml.so.1 through dlopen/dlsym, so the
// library has no undefined nvml* symbols and ctypes.CDLL loads it on machines
// without a driver. INTERNAL: nothing here is part of gocl's C API (gocl.h).
//
// The few NVML types below are written from NVML's documented ABI (return
// codes are ints, devices are opaque pointers); they carry a gocl prefix so
// they never clash with NVIDIA's nvml.h in a translation unit that has both.
#ifndef GOCL_NVML_H_
#define GOCL_NVML_H_

typedef int goclNvmlReturn;                            // nvmlReturn_t
typedef struct goclNvmlDeviceOpaque* goclNvmlDevice;  // nvmlDevice_t

#define GOCL_NVML_SUCCESS 0
// Our own code (never an NVML return): the function is absent from the library.
#define GOCL_NVML_NO_SYMBOL (-1)
// Our own code: not asked (an earlier step failed, or the pair is a diagonal).
#define GOCL_NVML_NOT_ASKED (-2)

#define GOCL_NVML_P2P_CAPS_READ 0
#define GOCL_NVML_P2P_CAPS_WRITE 1

// nvmlPciInfo_t as nvmlDeviceGetPciInfo_v3 fills it.
typedef struct {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
} goclNvmlPciInfo;

#define GOCL_NVML_MAX_GPUS 64
#define GOCL_NVML_STRING 96  // NVML's longest name/version buffer (device name v2)

// One device. Every *_rc is NVML's return code, GOCL_NVML_NO_SYMBOL or
// GOCL_NVML_NOT_ASKED; the value beside it is meaningful only when it is 0.
typedef struct {
  int handle_rc;
  int name_rc;
  char name[GOCL_NVML_STRING];
  int cc_rc;
  int cc_major, cc_minor;
  int pci_rc;
  goclNvmlPciInfo pci;
  int brand_rc;
  int brand;
} goclNvmlGPU;

// Everything one probe learns, in plain C memory (one cgo call fills it).
typedef struct {
  int loaded;                    // dlopen succeeded
  char load_error[256];          // dlerror() when it did not
  char missing_symbol[64];       // a required function that is absent ("" none)
  int init_rc;                   // nvmlInit_v2's result (GOCL_NVML_NOT_ASKED when not called)
  int driver_rc;
  char driver[GOCL_NVML_STRING];
  int cuda_rc;
  int cuda;
  int count_rc;
  unsigned int count;            // devices NVML reports (may exceed GOCL_NVML_MAX_GPUS)
  int ngpus;                     // entries filled in gpus (min(count, GOCL_NVML_MAX_GPUS))
  goclNvmlGPU gpus[GOCL_NVML_MAX_GPUS];
  int p2p_asked;                 // 1: the matrices below are filled (>= 2 devices, every handle);
                                 // GOCL_NVML_NO_SYMBOL: they would be, but nvmlDeviceGetP2PStatus is absent
  int p2p_read_rc[GOCL_NVML_MAX_GPUS][GOCL_NVML_MAX_GPUS];
  int p2p_read[GOCL_NVML_MAX_GPUS][GOCL_NVML_MAX_GPUS];
  int p2p_write_rc[GOCL_NVML_MAX_GPUS][GOCL_NVML_MAX_GPUS];
  int p2p_write[GOCL_NVML_MAX_GPUS][GOCL_NVML_MAX_GPUS];
} goclNvmlProbe;

// goclNvmlRun fills *p (which it zeroes first). It never calls NVML before a
// successful nvmlInit_v2, checks every dlsym, and ends with nvmlShutdown.
// Safe to call from several threads (NVML counts its inits).
void goclNvmlRun(goclNvmlProbe* p) __attribute__((visibility("hidden")));

// INTERNAL / TESTING ONLY (tests/python/test_nvml_shim.py): the NVML facts
// libgocl's reader gathers, as a JSON object with the gocl-doctor facts field
// names (nvml, driver_version, cuda_driver_version, gpus, p2p, missing).
// Returns malloc'd memory; the caller frees it with libc free(). Not declared
// in gocl.h and not covered by the API's stability promise.
char* goclgoNVMLFactsJSON(void);

#endif  // GOCL_NVML_H_

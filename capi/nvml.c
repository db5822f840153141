// libgocl's NVML reader (see nvml.h): dlopen libnvidia-ml.so.1, dlsym the
// dozen functions it needs, and read the facts gocl-doctor's go-nvml reader
// reads, in one call. Nothing is called before nvmlInit_v2 succeeds.
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "nvml.h"

typedef goclNvmlReturn (*fn_void)(void);
typedef goclNvmlReturn (*fn_str)(char*, unsigned int);
typedef goclNvmlReturn (*fn_intp)(int*);
typedef goclNvmlReturn (*fn_uintp)(unsigned int*);
typedef goclNvmlReturn (*fn_handle)(unsigned int, goclNvmlDevice*);
typedef goclNvmlReturn (*fn_dev_str)(goclNvmlDevice, char*, unsigned int);
typedef goclNvmlReturn (*fn_dev_2int)(goclNvmlDevice, int*, int*);
typedef goclNvmlReturn (*fn_dev_pci)(goclNvmlDevice, goclNvmlPciInfo*);
typedef goclNvmlReturn (*fn_dev_intp)(goclNvmlDevice, int*);  // enums are ints
typedef goclNvmlReturn (*fn_p2p)(goclNvmlDevice, goclNvmlDevice, int, int*);

// The library handle stays open for the life of the process, never
// dlclose()d: NVML may leave threads or exit handlers behind after
// nvmlShutdown, and unmapping code that can still run would crash the
// process later; another user in the process (torch, pynvml) may hold it
// anyway, and keeping it spares a reload on the next probe. A failed dlopen
// is retried by the next probe.
static pthread_mutex_t lib_mu = PTHREAD_MUTEX_INITIALIZER;
static void* lib_handle;

static void* open_nvml(char* err, size_t errlen) {
  pthread_mutex_lock(&lib_mu);
  if (lib_handle == NULL) {
    dlerror();
    // The loader's normal search: LD_LIBRARY_PATH, the ld.so cache, the
    // default directories (tests put a fake library first on the path).
    lib_handle = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib_handle == NULL) {
      const char* e = dlerror();
      snprintf(err, errlen, "%s", e != NULL ? e : "dlopen libnvidia-ml.so.1 failed");
    }
  }
  void* h = lib_handle;
  pthread_mutex_unlock(&lib_mu);
  return h;
}

// sym resolves name, NULL when absent. A function pointer stored in a
// void* is how dlsym works on every platform gocl builds for.
static void* sym(void* h, const char* name) {
  dlerror();
  void* p = dlsym(h, name);
  return dlerror() != NULL ? NULL : p;
}

#define TERMINATE(buf) ((buf)[sizeof(buf) - 1] = '\0')

void goclNvmlRun(goclNvmlProbe* p) {
  memset(p, 0, sizeof(*p));
  p->init_rc = p->driver_rc = p->cuda_rc = p->count_rc = GOCL_NVML_NOT_ASKED;

  void* h = open_nvml(p->load_error, sizeof(p->load_error));
  if (h == NULL) return;
  p->loaded = 1;

  // Required: without these there is nothing to read (or no way to end).
  fn_void init = (fn_void)sym(h, "nvmlInit_v2");
  fn_void shutdown = (fn_void)sym(h, "nvmlShutdown");
  fn_uintp count = (fn_uintp)sym(h, "nvmlDeviceGetCount_v2");
  fn_handle handle = (fn_handle)sym(h, "nvmlDeviceGetHandleByIndex_v2");
  const char* absent = init == NULL       ? "nvmlInit_v2"
                       : shutdown == NULL ? "nvmlShutdown"
                       : count == NULL    ? "nvmlDeviceGetCount_v2"
                       : handle == NULL   ? "nvmlDeviceGetHandleByIndex_v2"
                                          : NULL;
  if (absent != NULL) {
    snprintf(p->missing_symbol, sizeof(p->missing_symbol), "%s", absent);
    return;
  }
  // Optional: an absent one leaves its fact out.
  fn_str driver = (fn_str)sym(h, "nvmlSystemGetDriverVersion");
  fn_intp cuda = (fn_intp)sym(h, "nvmlSystemGetCudaDriverVersion_v2");
  if (cuda == NULL) cuda = (fn_intp)sym(h, "nvmlSystemGetCudaDriverVersion");
  fn_dev_str name = (fn_dev_str)sym(h, "nvmlDeviceGetName");
  fn_dev_2int cc = (fn_dev_2int)sym(h, "nvmlDeviceGetCudaComputeCapability");
  fn_dev_pci pci = (fn_dev_pci)sym(h, "nvmlDeviceGetPciInfo_v3");
  fn_dev_intp brand = (fn_dev_intp)sym(h, "nvmlDeviceGetBrand");
  fn_p2p p2p = (fn_p2p)sym(h, "nvmlDeviceGetP2PStatus");

  p->init_rc = init();
  if (p->init_rc != GOCL_NVML_SUCCESS) return;  // nothing else may be called

  p->driver_rc = GOCL_NVML_NO_SYMBOL;
  if (driver != NULL) {
    p->driver_rc = driver(p->driver, sizeof(p->driver));
    TERMINATE(p->driver);
  }
  p->cuda_rc = cuda != NULL ? cuda(&p->cuda) : GOCL_NVML_NO_SYMBOL;

  goclNvmlDevice devs[GOCL_NVML_MAX_GPUS];
  int all_handles = 1;
  p->count_rc = count(&p->count);
  if (p->count_rc == GOCL_NVML_SUCCESS) {
    p->ngpus = p->count < GOCL_NVML_MAX_GPUS ? (int)p->count : GOCL_NVML_MAX_GPUS;
  }
  for (int i = 0; i < p->ngpus; i++) {
    goclNvmlGPU* g = &p->gpus[i];
    g->name_rc = g->cc_rc = g->pci_rc = g->brand_rc = GOCL_NVML_NOT_ASKED;
    devs[i] = NULL;
    g->handle_rc = handle((unsigned int)i, &devs[i]);
    if (g->handle_rc != GOCL_NVML_SUCCESS) {
      all_handles = 0;
      continue;
    }
    g->name_rc = GOCL_NVML_NO_SYMBOL;
    if (name != NULL) {
      g->name_rc = name(devs[i], g->name, sizeof(g->name));
      TERMINATE(g->name);
    }
    g->cc_rc = cc != NULL ? cc(devs[i], &g->cc_major, &g->cc_minor) : GOCL_NVML_NO_SYMBOL;
    g->pci_rc = GOCL_NVML_NO_SYMBOL;
    if (pci != NULL) {
      g->pci_rc = pci(devs[i], &g->pci);
      TERMINATE(g->pci.busId);
      TERMINATE(g->pci.busIdLegacy);
    }
    g->brand_rc = brand != NULL ? brand(devs[i], &g->brand) : GOCL_NVML_NO_SYMBOL;
  }

  // Like gocl-doctor: the matrices need every device, and at least two.
  if (all_handles && p->ngpus >= 2 && (unsigned int)p->ngpus == p->count) {
    p->p2p_asked = p2p != NULL ? 1 : GOCL_NVML_NO_SYMBOL;
  }
  if (p->p2p_asked == 1) {
    for (int i = 0; i < p->ngpus; i++) {
      for (int j = 0; j < p->ngpus; j++) {
        if (i == j) {
          p->p2p_read_rc[i][j] = p->p2p_write_rc[i][j] = GOCL_NVML_NOT_ASKED;
          continue;
        }
        p->p2p_read_rc[i][j] = p2p(devs[i], devs[j], GOCL_NVML_P2P_CAPS_READ, &p->p2p_read[i][j]);
        p->p2p_write_rc[i][j] = p2p(devs[i], devs[j], GOCL_NVML_P2P_CAPS_WRITE, &p->p2p_write[i][j]);
      }
    }
  }
  shutdown();
}

package doctor

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// consumerOrWorkstation tells GeForce / RTX workstation cards (PCIe, the
// P2P-over-IOMMU trouble) from datacenter parts.
func consumerOrWorkstation(g gpuView) bool {
	if g.ccOK && g.cc.Major == 12 {
		return true
	}
	switch strings.ToLower(g.Brand) {
	case "geforce", "geforce_rtx", "nvidia_rtx", "quadro", "quadro_rtx", "titan", "titan_rtx":
		return true
	}
	n := strings.ToLower(g.Name)
	return strings.Contains(n, "geforce") || strings.Contains(n, " rtx")
}

// checkP2P is check "p2p" of kb.json: GPU peer-to-peer (P2P) safety.
func (j *judge) checkP2P() outcome {
	var o outcome
	if k := j.f.Kernel; k != nil && k.UVMHMMError != nil && *k.UVMHMMError {
		o.add("uvm-hmm", map[string]any{})
	}
	if len(j.f.GPUs) < 2 {
		if len(o.hits) > 0 {
			return o
		}
		return skip("fewer than two GPUs")
	}
	p := j.f.P2P
	if p == nil || len(p.Read) == 0 {
		if len(o.hits) > 0 {
			return o
		}
		return skip("no P2P matrix%s", missingWhy(j.f, "p2p"))
	}
	byIndex := map[int]gpuView{}
	for _, g := range j.gpus {
		byIndex[g.Index] = g
	}
	var p2pPairs, noP2PPairs []string
	var p2pGPUs, noP2PGPUs []gpuView
	statuses := map[string]bool{}
	seen := map[int]bool{}
	noSeen := map[int]bool{}
	for a := range p.Read {
		for b := a + 1; b < len(p.Read[a]); b++ {
			ga, gb := byIndex[a], byIndex[b]
			if !consumerOrWorkstation(ga) || !consumerOrWorkstation(gb) {
				continue
			}
			if j.f.Topology != nil && a < len(j.f.Topology.Matrix) && b < len(j.f.Topology.Matrix[a]) &&
				strings.HasPrefix(j.f.Topology.Matrix[a][b], "NV") {
				continue // NVLink bridge: not the PCIe case
			}
			read := p.Read[a][b]
			write := read
			if len(p.Write) > a && len(p.Write[a]) > b {
				write = p.Write[a][b]
			}
			pair := fmt.Sprintf("%d-%d", a, b)
			if read == "OK" && write == "OK" {
				p2pPairs = append(p2pPairs, pair)
				for _, g := range []gpuView{ga, gb} {
					if !seen[g.Index] {
						seen[g.Index] = true
						p2pGPUs = append(p2pGPUs, g)
					}
				}
			} else {
				noP2PPairs = append(noP2PPairs, pair)
				statuses[read] = true
				for _, g := range []gpuView{ga, gb} {
					if !noSeen[g.Index] {
						noSeen[g.Index] = true
						noP2PGPUs = append(noP2PGPUs, g)
					}
				}
			}
		}
	}
	if len(p2pPairs) > 0 {
		unsafe, unknown, rootFix := j.p2pHazards(p2pGPUs)
		vars := map[string]any{"Pairs": strings.Join(p2pPairs, ", "), "Names": names(p2pGPUs)}
		switch {
		case len(unsafe) > 0:
			vars["Why"], vars["RootFix"] = strings.Join(unsafe, "; "), strings.Join(rootFix, "; ")
			o.add("p2p-unsafe-iommu", vars)
		case len(unknown) > 0:
			vars["Why"] = strings.Join(unknown, "; ")
			o.add("p2p-unverified", vars)
		}
	}
	if len(noP2PPairs) > 0 {
		var st []string
		for s := range statuses {
			st = append(st, s)
		}
		sort.Strings(st)
		o.add("p2p-unsupported", map[string]any{"Pairs": strings.Join(noP2PPairs, ", "), "Names": names(noP2PGPUs), "Status": strings.Join(st, ", ")})
	}
	if len(o.hits) > 0 {
		return o
	}
	if len(p2pPairs) > 0 {
		iommu := "unknown"
		if j.f.Kernel != nil {
			iommu = j.f.Kernel.IOMMU
		}
		return pass("P2P on %s with IOMMU %s and no ACS redirection", strings.Join(p2pPairs, ", "), iommu)
	}
	return pass("no consumer/workstation PCIe GPU pair (NVLink or datacenter GPUs)")
}

// p2pHazards says what makes P2P unsafe for these GPUs (IOMMU translation,
// ACS redirection), what could not be read, and the root-cause fixes.
func (j *judge) p2pHazards(gs []gpuView) (unsafe, unknown, rootFix []string) {
	k := j.f.Kernel
	if k == nil {
		return nil, []string{"no kernel facts"}, nil
	}
	translated := false
	groupKnown := true
	var dmaGPUs []string
	dmaTypes := map[string]bool{}
	for _, g := range gs {
		switch g.IOMMUGroupType {
		case "DMA", "DMA-FQ":
			dmaGPUs = append(dmaGPUs, fmt.Sprint(g.Index))
			dmaTypes[g.IOMMUGroupType] = true
			translated = true
		case "":
			groupKnown = false
		}
	}
	if translated {
		unsafe = append(unsafe, fmt.Sprintf("the IOMMU translates the DMA of GPU %s (iommu group type %s)",
			strings.Join(dmaGPUs, ", "), strings.Join(slices.Sorted(maps.Keys(dmaTypes)), "/")))
	}
	if !groupKnown && !translated {
		switch k.IOMMU {
		case "translated":
			why := "the IOMMU is on"
			if len(k.CmdlineIOMMU) > 0 {
				why += " (kernel command line: " + strings.Join(k.CmdlineIOMMU, " ") + ")"
			}
			unsafe = append(unsafe, why)
			translated = true
		case "off", "passthrough":
		default:
			unknown = append(unknown, "IOMMU state unknown")
		}
	}
	if translated {
		rootFix = append(rootFix, "boot with iommu=pt (Intel: intel_iommu=on iommu=pt) or amd_iommu=off, or turn the IOMMU off in the BIOS if nothing needs it (VFIO passthrough does)")
	}
	gpuSet := map[int]bool{}
	for _, g := range gs {
		gpuSet[g.Index] = true
	}
	redirect := false
	for _, port := range k.ACS {
		if !gpuSet[port.GPU] {
			continue
		}
		var bad []string
		for _, fl := range port.Flags {
			if fl == "ReqRedir" || fl == "CmpltRedir" {
				bad = append(bad, fl+"+")
			}
		}
		if len(bad) > 0 {
			unsafe = append(unsafe, fmt.Sprintf("ACS redirects peer traffic on bridge %s above GPU %d (%s)", port.Device, port.GPU, strings.Join(bad, " ")))
			redirect = true
		}
	}
	if !redirect && (k.ACSReadable == nil || !*k.ACSReadable) {
		unknown = append(unknown, "PCIe ACS control registers unreadable (needs root)")
	}
	if redirect {
		rootFix = append(rootFix, "disable ACS in the BIOS (often 'PCIe ACS' / 'ACS Enable'), or clear it on the bridges with setpci -s <bridge> ECAP_ACS+6.w=0000 (until reboot)")
	}
	if len(unsafe) > 0 {
		unknown = nil
	}
	return unsafe, unknown, rootFix
}

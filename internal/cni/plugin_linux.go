package cni

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/mooringlb/mooring/internal/ipamd"
)

// Funcs returns the plugin's commands for skel.PluginMainFuncs.
func Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: cmdCheck, GC: cmdGC, Status: cmdStatus}
}

// Versions are the CNI versions the plugin speaks.
var Versions = version.All

// setup parses the config and returns a client bounded by its timeout. The
// calls take context.Background(): a context with a deadline starts a
// timer, and the first timer of a process starts the runtime's network
// poller, which this short-lived process otherwise never needs.
func setup(args *skel.CmdArgs) (*Config, *ipamd.Client, error) {
	c, err := ParseConfig(args.StdinData)
	if err != nil {
		return nil, nil, err
	}
	return c, ipamd.NewClient(c.IPAM.Socket).WithTimeout(c.timeout), nil
}

func cmdAdd(args *skel.CmdArgs) error {
	tr := newTrace()
	c, cl, err := setup(args)
	if err != nil {
		return err
	}
	tr.mark(&tr.parsed)
	ctx := context.Background()
	if c.Chained {
		return passThrough(c)
	}
	ns, pod, uid := podArgs(args.Args)
	al, err := cl.Add(ctx, ipamd.AddRequest{Key: attachment(c, args), Namespace: ns, Pod: pod, PodUID: uid})
	if err != nil {
		return cniError("ADD", err)
	}
	tr.mark(&tr.answered)
	err = types.PrintResult(result(c, al), c.CNIVersion)
	tr.mark(&tr.printed)
	tr.write()
	return err
}

func passThrough(c *Config) error {
	if len(c.RawPrev) == 0 {
		return types.NewError(types.ErrInvalidNetworkConfig, "mooring-ipam as a list entry needs a previous plugin's result",
			`put {"type": "mooring-ipam"} after the main plugin (bridge, ptp) in the list, not first`)
	}
	nc := c.NetConfForPrev()
	if err := version.ParsePrevResult(&nc); err != nil {
		return types.NewError(types.ErrDecodingFailure, "mooring-ipam: cannot read prevResult", err.Error())
	}
	return types.PrintResult(nc.PrevResult, c.CNIVersion)
}

func cmdDel(args *skel.CmdArgs) error {
	c, cl, err := setup(args)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if c.Chained {
		return nil
	}
	if err := cl.Del(ctx, attachment(c, args)); err != nil {
		return cniError("DEL", err)
	}
	return nil
}

func cmdCheck(args *skel.CmdArgs) error {
	c, cl, err := setup(args)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if c.Chained {
		return nil
	}
	al, err := cl.Check(ctx, attachment(c, args))
	if err != nil {
		return cniError("CHECK", err)
	}
	if len(c.RawPrev) == 0 {
		return nil
	}
	nc := c.NetConfForPrev()
	if err := version.ParsePrevResult(&nc); err != nil {
		return types.NewError(types.ErrDecodingFailure, "mooring-ipam: cannot read prevResult", err.Error())
	}
	prev, err := current.NewResultFromResult(nc.PrevResult)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, "mooring-ipam: cannot convert prevResult", err.Error())
	}
	for _, ip := range al.IPs {
		if !slices.ContainsFunc(prev.IPs, func(p *current.IPConfig) bool {
			a, ok := netip.AddrFromSlice(p.Address.IP)
			return ok && a.Unmap() == ip.Address.Addr()
		}) {
			return fmt.Errorf("mooring-ipam: the agent allocated %s to container %s %s but the runtime's result lacks it", ip.Address, args.ContainerID, args.IfName)
		}
	}
	return nil
}

// attachment is the agent's key for this call: the network's name, the
// container and the interface, as CNI identifies an attachment.
func attachment(c *Config, args *skel.CmdArgs) ipamd.Key {
	return ipamd.Key{Network: c.Name, ContainerID: args.ContainerID, IfName: args.IfName}
}

// cmdGC frees the network's allocations whose attachments the runtime no
// longer lists. Without the list it frees nothing and says why: an absent
// list is not "nothing is in use".
func cmdGC(args *skel.CmdArgs) error {
	c, cl, err := setup(args)
	if err != nil {
		return err
	}
	if !c.HasValidAttachments {
		return types.NewError(types.ErrInvalidNetworkConfig, "mooring-ipam GC: no cni.dev/valid-attachments: nothing was freed",
			"a GC must list the attachments still in use (CNI 1.1): freeing without it would take addresses from running pods")
	}
	if c.Name == "" {
		return types.NewError(types.ErrInvalidNetworkConfig, "mooring-ipam GC: the network config has no name: nothing was freed",
			`set "name" in the network config: allocations are kept per network`)
	}
	valid := make([]ipamd.Key, 0, len(c.ValidAttachments))
	for _, a := range c.ValidAttachments {
		valid = append(valid, ipamd.Key{Network: c.Name, ContainerID: a.ContainerID, IfName: a.IfName})
	}
	if _, err := cl.GC(context.Background(), c.Name, valid); err != nil {
		return cniError("GC", err)
	}
	return nil
}

func cmdStatus(args *skel.CmdArgs) error {
	_, cl, err := setup(args)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := cl.Status(ctx); err != nil {
		return types.NewError(types.ErrPluginNotAvailable, "mooring-ipam: cannot hand out pod addresses", err.Error())
	}
	return nil
}

// cniError maps an agent error to a CNI error code: unreachable agent, no
// room yet, a pool that cannot be looked up now, is missing or is
// exhausted → 11 (try again later: the kubelet retries, and the agent puts
// the reason on the pod as an Event), bad request → invalid config.
func cniError(op string, err error) error {
	var un *ipamd.UnreachableError
	var ce *ipamd.CallError
	switch {
	case errors.As(err, &un):
		return types.NewError(types.ErrTryAgainLater, "mooring-ipam "+op+": agent unreachable", un.Error())
	case errors.As(err, &ce) && ce.Kind == ipamd.KindNoBlock:
		return types.NewError(types.ErrTryAgainLater, "mooring-ipam "+op+": no free pod address", ce.Message)
	case errors.As(err, &ce) && ce.Kind == ipamd.KindUnavailable:
		return types.NewError(types.ErrTryAgainLater, "mooring-ipam "+op+": the pod's pool cannot be determined now", ce.Message)
	case errors.As(err, &ce) && ce.Kind == ipamd.KindNoPool:
		return types.NewError(types.ErrTryAgainLater, "mooring-ipam "+op+": the pod's pool does not exist", ce.Message)
	case errors.As(err, &ce) && ce.Kind == ipamd.KindExhausted:
		return types.NewError(types.ErrTryAgainLater, "mooring-ipam "+op+": the pod's pool cannot give this node more addresses", ce.Message)
	case errors.As(err, &ce) && ce.Kind == ipamd.KindBad:
		return types.NewError(types.ErrInvalidNetworkConfig, "mooring-ipam "+op+": bad request", ce.Message)
	case errors.As(err, &ce) && ce.Kind == ipamd.KindNotFound:
		return types.NewError(types.ErrInvalidEnvironmentVariables, "mooring-ipam "+op+": unknown attachment", ce.Message)
	}
	return types.NewError(types.ErrInternal, "mooring-ipam "+op+" failed", err.Error())
}

package bgpagent

import (
	"context"
	"fmt"
	"reflect"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/bgp"
	"github.com/mooringlb/mooring/internal/bgpspeaker"
)

// statusWriter keeps the node's BGPSpeaker true: it writes when a session
// changes (state, reason, BFD, timers), at most once per minInterval, and
// lets the prefix counters lag up to countsEvery so that Services cost no
// write.
type statusWriter struct {
	c           client.Client
	node        string
	minInterval time.Duration
	countsEvery time.Duration
	now         func() time.Time

	last       *mooringv1.BGPSpeakerStatus // what was written
	lastWrite  time.Time
	lastCounts time.Time
	obj        *mooringv1.BGPSpeaker
	// writes counts status writes (tests and the benchmark read it).
	writes int
}

// desiredStatus builds the status from the speaker's sessions.
func desiredStatus(nr bgp.NodeResult, sessions []bgpspeaker.SessionState, applied *mooringv1.AppliedConfig) mooringv1.BGPSpeakerStatus {
	st := mooringv1.BGPSpeakerStatus{Applied: applied}
	if nr.RouterID.IsValid() && len(sessions) > 0 {
		st.RouterID = nr.RouterID.String()
	}
	for _, s := range sessions {
		p := mooringv1.BGPPeerSession{
			Name: s.Peer, PeerAddress: s.Address.String(), PeerASN: int64(s.PeerASN),
			State: mooringv1.BGPSessionState(s.State), BFDState: mooringv1.BFDSessionState(s.BFD),
			LastTransitionTime: metav1.NewTime(s.Since.Truncate(time.Second)),
			Message:            s.Message, PrefixesSent: s.PrefixesSent, PrefixesReceived: s.PrefixesReceived,
		}
		for _, ses := range nr.Sessions {
			if ses.Peer == s.Peer {
				p.LocalASN = int64(ses.LocalASN)
			}
		}
		if s.State == bgpspeaker.StateEstablished {
			p.Reason = ""
			p.EstablishedTime = ptr.To(metav1.NewTime(s.Established))
			p.HoldTime = &metav1.Duration{Duration: s.HoldTime}
			p.KeepaliveTime = &metav1.Duration{Duration: s.KeepaliveTime}
			p.GracefulRestart = s.GracefulRestart
			for _, f := range s.Families {
				p.Families = append(p.Families, mooringv1.BGPAddressFamily(f.String()))
			}
		} else {
			p.Reason = s.Reason
		}
		st.Peers = append(st.Peers, p)
		st.PeerCount++
		if s.State == bgpspeaker.StateEstablished {
			st.EstablishedCount++
		}
	}
	return st
}

// withoutCounts is st with the prefix counters zeroed: what decides
// whether a write is due.
func withoutCounts(st mooringv1.BGPSpeakerStatus) mooringv1.BGPSpeakerStatus {
	st.Peers = append([]mooringv1.BGPPeerSession(nil), st.Peers...)
	for i := range st.Peers {
		st.Peers[i].PrefixesSent, st.Peers[i].PrefixesReceived = 0, 0
	}
	return st
}

// due reports whether want must be written now.
func (w *statusWriter) due(want mooringv1.BGPSpeakerStatus) bool {
	now := w.now()
	switch {
	case w.last == nil:
		return true
	case now.Sub(w.lastWrite) < w.minInterval:
		return false
	case !reflect.DeepEqual(withoutCounts(*w.last), withoutCounts(want)):
		return true
	}
	return now.Sub(w.lastCounts) >= w.countsEvery && !reflect.DeepEqual(*w.last, want)
}

// write creates or updates the BGPSpeaker when due. Cost: at most one
// API write (two when it must be created).
func (w *statusWriter) write(ctx context.Context, want mooringv1.BGPSpeakerStatus) error {
	if !w.due(want) {
		return nil
	}
	if w.obj == nil && w.last == nil && want.PeerCount == 0 {
		// A node without sessions has nothing to say: no object unless
		// one is left from before (then it is emptied).
		var obj mooringv1.BGPSpeaker
		err := w.c.Get(ctx, client.ObjectKey{Name: w.node}, &obj)
		if apierrors.IsNotFound(err) || (err == nil && obj.Status.PeerCount == 0) {
			w.last, w.lastWrite, w.lastCounts = &want, w.now(), w.now()
			return nil
		}
	}
	if w.obj == nil {
		obj, err := w.ensure(ctx)
		if err != nil {
			return err
		}
		w.obj = obj
	}
	w.obj.Status = want
	err := w.c.Status().Update(ctx, w.obj)
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		w.obj = nil // re-read (or re-create) next time
	}
	if err != nil {
		return fmt.Errorf("writing BGPSpeaker %s: %w", w.node, err)
	}
	w.writes++
	now := w.now()
	w.last, w.lastWrite, w.lastCounts = &want, now, now
	return nil
}

// ensure reads the node's BGPSpeaker or creates it, owned by the Node so
// it goes with it.
func (w *statusWriter) ensure(ctx context.Context) (*mooringv1.BGPSpeaker, error) {
	var obj mooringv1.BGPSpeaker
	err := w.c.Get(ctx, client.ObjectKey{Name: w.node}, &obj)
	if err == nil {
		return &obj, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading BGPSpeaker %s: %w", w.node, err)
	}
	var node corev1.Node
	if err := w.c.Get(ctx, client.ObjectKey{Name: w.node}, &node); err != nil {
		return nil, fmt.Errorf("reading Node %s to own its BGPSpeaker: %w", w.node, err)
	}
	obj = mooringv1.BGPSpeaker{ObjectMeta: metav1.ObjectMeta{Name: w.node, OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, BlockOwnerDeletion: ptr.To(false)}}}}
	if err := w.c.Create(ctx, &obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating BGPSpeaker %s: %w", w.node, err)
	}
	if err := w.c.Get(ctx, client.ObjectKey{Name: w.node}, &obj); err != nil {
		return nil, err
	}
	return &obj, nil
}

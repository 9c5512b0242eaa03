package announce

import (
	"fmt"
	"regexp"
	"strings"
)

// Operator is a label selector requirement's operator, spelled as in
// Kubernetes' metav1.LabelSelector.
type Operator string

// The operators Kubernetes defines for label selectors.
const (
	OpIn           Operator = "In"
	OpNotIn        Operator = "NotIn"
	OpExists       Operator = "Exists"
	OpDoesNotExist Operator = "DoesNotExist"
)

// Requirement is one matchExpressions entry.
type Requirement struct {
	Key      string
	Operator Operator
	Values   []string
}

// Selector is a Kubernetes label selector as data, so the core can validate
// and match it without importing k8s.io. Nil or empty selects everything.
// The CRD schema does not validate selectors, so anything may arrive here.
type Selector struct {
	MatchLabels      map[string]string
	MatchExpressions []Requirement
}

// Validation rules follow k8s.io/apimachinery's label validation.
var (
	labelNameRE  = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

func validKey(k string) error {
	prefix, name, found := strings.Cut(k, "/")
	if !found {
		prefix, name = "", k
	} else if prefix == "" || len(prefix) > 253 || !dnsSubdomain.MatchString(prefix) {
		return fmt.Errorf("label key %q: prefix must be a DNS subdomain", k)
	}
	if len(name) > 63 || !labelNameRE.MatchString(name) {
		return fmt.Errorf("label key %q: name must be 1-63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric", k)
	}
	return nil
}

func validValue(v string) error {
	if v != "" && (len(v) > 63 || !labelNameRE.MatchString(v)) {
		return fmt.Errorf("label value %q: must be empty or 1-63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric", v)
	}
	return nil
}

// Validate reports the first problem, or nil. A nil selector is valid.
func (s *Selector) Validate() error {
	if s == nil {
		return nil
	}
	for k, v := range s.MatchLabels {
		if err := validKey(k); err != nil {
			return fmt.Errorf("matchLabels: %w", err)
		}
		if err := validValue(v); err != nil {
			return fmt.Errorf("matchLabels[%s]: %w", k, err)
		}
	}
	for i, r := range s.MatchExpressions {
		if err := r.validate(); err != nil {
			return fmt.Errorf("matchExpressions[%d]: %w", i, err)
		}
	}
	return nil
}

func (r Requirement) validate() error {
	if err := validKey(r.Key); err != nil {
		return err
	}
	switch r.Operator {
	case OpIn, OpNotIn:
		if len(r.Values) == 0 {
			return fmt.Errorf("operator %s needs at least one value", r.Operator)
		}
	case OpExists, OpDoesNotExist:
		if len(r.Values) != 0 {
			return fmt.Errorf("operator %s takes no values", r.Operator)
		}
	default:
		return fmt.Errorf("unknown operator %q: use In, NotIn, Exists or DoesNotExist", r.Operator)
	}
	for _, v := range r.Values {
		if err := validValue(v); err != nil {
			return err
		}
	}
	return nil
}

// Matches reports whether labels satisfy every requirement. It assumes a
// validated selector; a nil selector matches everything.
func (s *Selector) Matches(labels map[string]string) bool {
	return s.matches(func(k string) (string, bool) { v, ok := labels[k]; return v, ok })
}

// MatchesService reports whether a Service's labels and its virtual labels
// (LabelServiceNamespace, LabelServiceName) satisfy s, as a policy's
// serviceSelector matches; internal/bgp uses it for advertisements.
func (s *Selector) MatchesService(svc *Service) bool { return s.matchesService(svc) }

// matchesService matches a Service's labels and its virtual labels.
func (s *Selector) matchesService(svc *Service) bool {
	return s.matches(func(k string) (string, bool) {
		switch k {
		case LabelServiceNamespace:
			return svc.Key.Namespace, true
		case LabelServiceName:
			return svc.Key.Name, true
		}
		v, ok := svc.Labels[k]
		return v, ok
	})
}

func (s *Selector) matches(label func(string) (string, bool)) bool {
	if s == nil {
		return true
	}
	for k, v := range s.MatchLabels {
		if got, ok := label(k); !ok || got != v {
			return false
		}
	}
	for _, r := range s.MatchExpressions {
		if !r.matches(label) {
			return false
		}
	}
	return true
}

func (r Requirement) matches(label func(string) (string, bool)) bool {
	v, ok := label(r.Key)
	switch r.Operator {
	case OpIn:
		return ok && contains(r.Values, v)
	case OpNotIn:
		return !ok || !contains(r.Values, v)
	case OpExists:
		return ok
	case OpDoesNotExist:
		return !ok
	}
	return false
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

package cli

import (
	"errors"
	"flag"
	"strconv"
	"time"
)

// decimal is a uint64 flag read in base 10 only: "0100", "0x40", "0b1",
// "1_000" and "+5" are refused rather than read as octal, hexadecimal or
// binary (flag.Uint64 would read "0100" as 64).
type decimal uint64

// errNotDecimal is what flag wraps when a numeric flag is not plain decimal.
var errNotDecimal = errors.New("want a decimal number (digits only, no leading zero, no 0x)")

func (d *decimal) String() string {
	if d == nil {
		return "0"
	}
	return strconv.FormatUint(uint64(*d), 10)
}

func (d *decimal) Set(s string) error {
	v, err := parseDecimal(s)
	if err != nil {
		return err
	}
	*d = decimal(v)
	return nil
}

// parseDecimal reads s as a plain decimal uint64.
func parseDecimal(s string) (uint64, error) {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return 0, errNotDecimal
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errNotDecimal
		}
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, errors.New("out of range: the largest is 18446744073709551615")
	}
	return v, nil
}

// decimalFlag defines a decimal uint64 flag on fs.
func decimalFlag(fs *flag.FlagSet, name string, value uint64, usage string) *uint64 {
	p := new(uint64)
	*p = value
	fs.Var((*decimal)(p), name, usage)
	return p
}

// timeLimit is a duration flag that must be positive (--timeout): a time
// limit of 0 or less would end the command's work before it starts, and
// the failure would then be blamed on what it waited for.
type timeLimit time.Duration

// errNotPositive is what flag wraps when a time limit is 0 or less.
var errNotPositive = errors.New("not a positive duration")

func (d *timeLimit) String() string {
	if d == nil {
		return "0s"
	}
	return time.Duration(*d).String()
}

func (d *timeLimit) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v <= 0 {
		return errNotPositive
	}
	*d = timeLimit(v)
	return nil
}

// Get makes the flag a duration for the help and the errors.
func (d *timeLimit) Get() any { return time.Duration(*d) }

// timeLimitVar defines a time limit flag on fs, stored in p.
func timeLimitVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*timeLimit)(p), name, usage)
}

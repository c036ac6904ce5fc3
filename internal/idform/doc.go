// Package idform is the arithmetic of the id forms, apart from any
// counter, registry or host record: which counter numbers a form hands
// out (the decimal form skips those ending in 0), how an id is written
// ("<name>-<number>", "<node number>.<number>", or number × stride + node
// number as one integer), the largest counter number under a form's
// bound, how many numbers a request of k ids takes and whether they fit
// (Fits, Span, DecimalSpan), and parsed ids (ID, ParseID).
//
// A Form is made by New, which checks the node number, stride and bound
// together; its zero Limit never occurs. The errors are package errs's:
// ErrInvalidOption for a form that cannot be made, ErrExhausted for
// numbers past the bound, ErrInvalidID for a string that is no id.
package idform

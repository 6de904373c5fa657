// Package v20170312 stands in for Tencent Cloud's VPC SDK, whose module zip
// the Go module proxy refuses. Only flannel's tencent-vpc backend uses it,
// and the charm refuses that backend: every call returns ErrUnavailable.
package v20170312

import "errors"

var ErrUnavailable = errors.New("the tencent-vpc backend is not built into this flanneld")

type Filter struct {
	Name   *string
	Values []*string
}

type Route struct {
	DestinationCidrBlock *string
	GatewayType          *string
	GatewayId            *string
	RouteType            *string
	Enabled              *bool
	RouteId              *uint64
}

type RouteTable struct {
	RouteTableId *string
	RouteSet     []*Route
}

type DescribeRouteTablesRequest struct{ Filters []*Filter }

type DescribeRouteTablesResponse struct {
	Response *struct{ RouteTableSet []*RouteTable }
}

type DeleteRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

type DeleteRoutesResponse struct{}

type CreateRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

type CreateRoutesResponse struct{}

type Client struct{}

func NewClientWithSecretId(secretId, secretKey, region string) (*Client, error) {
	return nil, ErrUnavailable
}

func NewDescribeRouteTablesRequest() *DescribeRouteTablesRequest { return &DescribeRouteTablesRequest{} }
func NewDeleteRoutesRequest() *DeleteRoutesRequest               { return &DeleteRoutesRequest{} }
func NewCreateRoutesRequest() *CreateRoutesRequest               { return &CreateRoutesRequest{} }

func (c *Client) DescribeRouteTables(*DescribeRouteTablesRequest) (*DescribeRouteTablesResponse, error) {
	return nil, ErrUnavailable
}
func (c *Client) DeleteRoutes(*DeleteRoutesRequest) (*DeleteRoutesResponse, error) {
	return nil, ErrUnavailable
}
func (c *Client) CreateRoutes(*CreateRoutesRequest) (*CreateRoutesResponse, error) {
	return nil, ErrUnavailable
}
